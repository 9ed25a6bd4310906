#!/usr/bin/env bash
# Runs, from a Linux x86-64 machine, the checks of the built wheels (dist/)
# on every platform reachable here, and prints one line per check:
#
#   wheels   python/build_wheels.py --check-only (tags, machine types, glibc
#            symbol versions, macOS minimum, stripping, auditwheel)
#   vet      go vet for darwin/arm64, darwin/amd64, windows/amd64,
#            windows/arm64 and linux/arm64 (capi with cgo through zig cc)
#   arm64    zrecord and zsampler tests built for linux/arm64, run under
#            qemu-aarch64-static
#   windows  zrecord and zsampler tests built for windows/amd64, run under Wine
#   smoke-*  python/abi_smoke.c cross-compiled with zig cc, run against the
#            library of each wheel it can run: glibc x86-64 (native), musl
#            x86-64 (Debian's musl loader), glibc arm64 (qemu), Windows x64 (Wine)
#   venv     the manylinux x86-64 wheel installed into a fresh venv, the
#            quick start and the pytest suite run against it, outside the checkout
#
# Needs: go, the pinned ziglang (pip), and from Debian qemu-user-static,
# libc6-arm64-cross, musl, wine, wine64 (apt-get install them). A check
# whose tool is missing is reported as SKIP with the reason. Exit status 1 if
# any check failed.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-python3}
GO=${GO:-go}
DIST=${DIST:-$ROOT/dist}
WORK=$(mktemp -d /tmp/loaderx-check.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
VERSION=$($PYTHON -c 'import tomllib;print(tomllib.load(open("pyproject.toml","rb"))["project"]["version"])')
ZIG="$PYTHON -m ziglang"
export ROOT PYTHON GO DIST WORK VERSION ZIG
LOG=$ROOT/build/check-logs
mkdir -p "$LOG"
declare -a RESULTS=()
FAILED=0

record() { # name status detail
	RESULTS+=("$(printf '%-14s %-5s %s' "$1" "$2" "$3")")
	[ "$2" = FAIL ] && FAILED=1
	echo "== $1: $2 $3"
}

# want SECTION: whether ONLY (a space-separated list of sections: wheels vet
# arm64 windows smoke venv) is empty or names SECTION
want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }

# run NAME TIMEOUT CMD...: runs CMD (a program or a function of this script)
# with its output in build/check-logs/NAME.log
run() {
	local name=$1 limit=$2
	shift 2
	if declare -F "$1" >/dev/null; then
		export -f "$1" wheel
		set -- bash -c '"$@"' _ "$@"
	fi
	if timeout "$limit" "$@" >"$LOG/$name.log" 2>&1; then
		record "$name" PASS "$(tail -n 1 "$LOG/$name.log" | cut -c1-100)"
	else
		record "$name" FAIL "exit $?; see build/check-logs/$name.log"
	fi
}

wheel() { echo "$DIST/loaderx-$VERSION-py3-none-$1.whl"; }

# unpack_lib TAG DIR: the wheel's loaderx/lib into DIR
unpack_lib() {
	mkdir -p "$2" && $PYTHON -c 'import sys,zipfile; z=zipfile.ZipFile(sys.argv[1]); [z.extract(n, sys.argv[2]) for n in z.namelist() if n.startswith("loaderx/lib/")]' "$(wheel "$1")" "$2"
}

# -- wheels ----------------------------------------------------------------------
want wheels && run wheels 600 $PYTHON python/build_wheels.py --check-only

# -- vet -------------------------------------------------------------------------
vet_all() {
	local t goos goarch triple
	for t in darwin/arm64/aarch64-macos.11.0 darwin/amd64/x86_64-macos.11.0 windows/amd64/x86_64-windows-gnu \
		windows/arm64/aarch64-windows-gnu linux/arm64/aarch64-linux-gnu.2.17; do
		IFS=/ read -r goos goarch triple <<<"$t"
		echo "vet $goos/$goarch"
		GOOS=$goos GOARCH=$goarch $GO vet ./zrecord/... ./zsampler/... ./steppipe/... || return 1
		GOOS=$goos GOARCH=$goarch CGO_ENABLED=1 CC="$ZIG cc -target $triple" $GO vet ./capi || return 1
	done
	echo "vet: 5 platforms clean"
}
want vet && run vet 900 vet_all

# -- linux/arm64 under qemu ------------------------------------------------------
# Skipped under emulation: TestCrashKill re-executes the test binary (no
# binfmt_misc here, so the child cannot start); TestGatherAfterTruncation
# relies on the fault address of a SIGBUS, which qemu-user does not pass on;
# TestFaultInjection and TestDiskFull map hundreds of 4 GiB spans, which
# qemu-user backs with real memory (16 GB resident before it was stopped).
# qemu-user 7.2 also keeps bookkeeping for every guest page of every mapping
# it has seen: one process running the whole zrecord suite grew past 24 GB
# and was killed by the kernel. So each top-level test runs in its own qemu
# process, stopped (and counted as failed) if it passes MAX_RSS_KB resident;
# TestModel and TestPowerCut (hundreds of stores each) pass 4 GB that way,
# and so do the tests that open thousands of damaged stores (TestOpenDamaged,
# TestCorruptionSweep, TestUpgradeFaults); TestTwoHandlesUnderAddressLimit
# sets an address-space limit that qemu's own reservations exceed. Tests run
# in the package directory, as go test runs them, so testdata/ is found.
QEMU_SKIP='TestCrashKill|TestGatherAfterTruncation|TestFaultInjection|TestDiskFull|TestModel|TestPowerCut|TestOpenDamaged|TestCorruptionSweep|TestUpgradeFaults|TestTwoHandlesUnderAddressLimit'
MAX_RSS_KB=${MAX_RSS_KB:-4000000}
export QEMU_SKIP MAX_RSS_KB

# arm64_each_test BINARY: every test of BINARY in its own qemu process
arm64_each_test() {
	local bin=$1 t pid rss passed=0 failed=0 skipped=0
	for t in $(qemu-aarch64-static "$bin" -test.list '.*' | grep '^Test'); do
		if [[ $t =~ ^($QEMU_SKIP)$ ]]; then
			echo "SKIP $t (see check_platforms.sh)"
			skipped=$((skipped + 1))
			continue
		fi
		(cd zrecord && exec qemu-aarch64-static "$bin" -test.short -test.run "^$t\$") >"$bin.$t.log" 2>&1 &
		pid=$!
		while kill -0 "$pid" 2>/dev/null; do
			rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null)
			if [ "${rss:-0}" -gt "$MAX_RSS_KB" ]; then
				kill -9 "$pid"
				echo "stopped $t: $rss kB resident" >>"$bin.$t.log"
			fi
			sleep 0.5
		done
		if wait "$pid"; then
			echo "ok   $t"
			passed=$((passed + 1))
		else
			echo "FAIL $t"
			tail -n 20 "$bin.$t.log"
			failed=$((failed + 1))
		fi
	done
	echo "arm64 zrecord: $passed passed, $failed failed, $skipped skipped"
	[ "$failed" -eq 0 ]
}
if ! want arm64; then
	:
elif command -v qemu-aarch64-static >/dev/null; then
	if GOARCH=arm64 $GO test -c -o "$WORK/zrecord.arm64" ./zrecord && GOARCH=arm64 $GO test -c -o "$WORK/zsampler.arm64" ./zsampler; then
		run arm64-zsampler 900 qemu-aarch64-static "$WORK/zsampler.arm64" -test.short
		run arm64-zrecord 1800 arm64_each_test "$WORK/zrecord.arm64"
	else
		record arm64 FAIL "go test -c for linux/arm64 failed"
	fi
else
	record arm64 SKIP "qemu-aarch64-static not installed (apt-get install qemu-user-static)"
fi

# -- windows/amd64 under Wine ----------------------------------------------------
# Wine 8 (Debian 12) lacks two things Go programs use: bcryptprimitives.dll
# (ProcessPrng, which the Go runtime loads from system32 at start) and the
# file-disposition call behind Go 1.26's os.RemoveAll (it fails with
# "Invalid function", so every t.TempDir cleanup fails). The prefix gets a
# ProcessPrng built here on RtlGenRandom, and the test binaries are built
# with Go 1.25.0 (the go.mod minimum), whose RemoveAll works on Wine.
# TestCrashKill is skipped: it kills a child with a signal.
WINE_SKIP='TestCrashKill'
if ! want windows; then
	:
elif command -v wine >/dev/null; then
	export WINEPREFIX=$ROOT/build/wineprefix WINEDEBUG=-all
	mkdir -p "$WINEPREFIX"
	[ -d "$WINEPREFIX/drive_c/windows/system32" ] || timeout 300 wineboot --init >"$LOG/wineboot.log" 2>&1
	cat >"$WORK/bcryptprimitives.c" <<'EOF'
#include <windows.h>
BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len > 0) {
        ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!SystemFunction036(data, n)) return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}
EOF
	$ZIG cc -target x86_64-windows-gnu -shared -O2 -o "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" \
		"$WORK/bcryptprimitives.c" -ladvapi32
	if GOTOOLCHAIN=go1.25.0 GOOS=windows $GO test -c -o "$WORK/zrecord.exe" ./zrecord &&
		GOTOOLCHAIN=go1.25.0 GOOS=windows $GO test -c -o "$WORK/zsampler.exe" ./zsampler; then
		run windows-zsampler 900 wine "$WORK/zsampler.exe" -test.short
		run windows-zrecord 900 bash -c 'cd zrecord && exec wine "$0" -test.short -test.skip "$1"' "$WORK/zrecord.exe" "$WINE_SKIP"
	else
		record windows FAIL "go test -c for windows/amd64 failed"
	fi
else
	record windows SKIP "wine not installed (apt-get install wine wine64)"
fi

# -- the C ABI smoke program ---------------------------------------------------
smoke() { # name tag zig-target runner...
	local name=$1 tag=$2 triple=$3
	shift 3
	if [ ! -f "$(wheel "$tag")" ]; then
		record "$name" SKIP "no $tag wheel in dist/ (musllinux: not built by default, see build_wheels.py)"
		return
	fi
	unpack_lib "$tag" "$WORK/$tag" || { record "$name" FAIL "cannot unpack $(wheel "$tag")"; return; }
	local lib ext=""
	lib=$(ls "$WORK/$tag"/loaderx/lib/*loaderx.{so,dll} 2>/dev/null | head -n 1)
	local link=""
	case $triple in *windows*) ext=.exe ;; *musl*) link=-dynamic ;; esac
	if ! $ZIG cc -target "$triple" $link -O2 -Wall -o "$WORK/smoke-$tag$ext" python/abi_smoke.c >"$LOG/$name-cc.log" 2>&1; then
		record "$name" FAIL "zig cc failed; see build/check-logs/$name-cc.log"
		return
	fi
	run "$name" 300 "$@" "$WORK/smoke-$tag$ext" "$lib" "$WORK/store-$tag"
}
want smoke && smoke smoke-glibc manylinux_2_17_x86_64 x86_64-linux-gnu.2.17
if ! want smoke; then
	:
elif [ -e /lib/ld-musl-x86_64.so.1 ]; then
	smoke smoke-musl musllinux_1_2_x86_64 x86_64-linux-musl
else
	record smoke-musl SKIP "no musl loader (apt-get install musl)"
fi
if ! want smoke; then
	:
elif command -v qemu-aarch64-static >/dev/null && [ -d /usr/aarch64-linux-gnu ]; then
	smoke smoke-arm64 manylinux_2_17_aarch64 aarch64-linux-gnu.2.17 qemu-aarch64-static -L /usr/aarch64-linux-gnu
else
	record smoke-arm64 SKIP "needs qemu-user-static and libc6-arm64-cross"
fi
if want smoke && command -v wine >/dev/null; then
	export WINEPREFIX=$ROOT/build/wineprefix WINEDEBUG=-all
	smoke smoke-windows win_amd64 x86_64-windows-gnu wine
fi

# -- the manylinux wheel in a fresh venv, outside the checkout -------------------
venv_suite() {
	local py=$1 venv=$WORK/venv-$(basename "$1")
	"$py" -m venv "$venv" || return 1
	"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$(wheel manylinux_2_17_x86_64)" pytest || return 1
	mkdir -p "$WORK/outside/python" "$WORK/outside/zrecord" && cp -r tests README.md docs examples "$WORK/outside/" &&
		cp python/abi_smoke.c "$WORK/outside/python/" && cp -r zrecord/testdata "$WORK/outside/zrecord/" && cd "$WORK/outside" || return 1
	"$venv/bin/python" - <<'EOF' || return 1
import os, tempfile
import numpy as np
import loaderx
from loaderx.converter import from_numpy
from loaderx.dataset import DenseDataset
from loaderx.dataloader import DataLoader
assert "site-packages" in loaderx.__file__, loaderx.__file__
d = tempfile.mkdtemp()
data = np.arange(1000 * 12, dtype=np.float32).reshape(1000, 3, 4)
label = np.arange(1000, dtype=np.int64)
from_numpy(os.path.join(d, "train_data"), data)
from_numpy(os.path.join(d, "train_label"), label)
loader = DataLoader({"data": DenseDataset(os.path.join(d, "train_data")), "label": DenseDataset(os.path.join(d, "train_label"))},
                    batch_size=256, num_workers=4, seed=0)
for step, batch in zip(range(20), loader):
    x, y = batch["data"], batch["label"]
    assert x.shape == (256, 3, 4) and (x == data[y]).all()
loader.close()
print("quick start: 20 batches exact from", loaderx.__file__)
EOF
	# test_cdef and test_packaging check the checkout's sources, not the install
	LOADERX_NO_BUILD=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider tests \
		--ignore=tests/test_cdef.py --ignore=tests/test_packaging.py
}
for py in python3.11 python3.13 python3.14 python3.15; do
	if ! want venv; then
		:
	elif "$py" -c 'import sys' >/dev/null 2>&1; then
		run "venv-$py" 1200 venv_suite "$(command -v "$py")"
	else
		record "venv-$py" SKIP "$py not installed here"
	fi
done

echo
echo "== summary"
printf '%s\n' "${RESULTS[@]}"
exit $FAILED
