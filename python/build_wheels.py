#!/usr/bin/env python3
"""Build one loaderx wheel per platform, from Linux, and check each one.

    python3 python/build_wheels.py [--out DIR] [--only TAG ...] [--check-only]

cross-compiles the Go core with cgo and ``zig cc`` (the ``ziglang`` PyPI
package, pinned to :data:`ZIGLANG_VERSION`) as the C compiler, once per entry
of :data:`TARGETS`, through :func:`build_native.build` with GOOS, GOARCH, CC
and a stripping ``-ldflags`` set, and packs a ``py3-none-<platform>`` wheel:
the ``loaderx`` package, exactly one native library (the target's), its
header and ``cdef.h``, LICENSE and the project metadata. The glibc and macOS
minimums are pinned in the zig target triples, so each tag is honest; after
packing, :func:`check_wheel` verifies the wheel from its bytes alone (file
list, tag, the library's ELF / Mach-O / PE machine type, glibc symbol
versions, macOS minimum, stripping) and, for Linux wheels, ``auditwheel
show`` when it is installed.

The package is built into ``DIR`` (default ``dist/``); a target that fails to
build is reported by name and the others go on; the exit status is 1 if any
target failed. Importable: :data:`TARGETS`, :func:`wheel_name`,
:func:`build_wheel`, :func:`check_wheel`, :func:`project_metadata` (the
packaging test uses the last three without building anything).

Its length: the per-platform table, the cross-build, the wheel packing and
the after-the-fact checks of each binary format (ELF, Mach-O,
PE) belong together as one release procedure; each check is short and they share the target table.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.metadata
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_native

ROOT = build_native.ROOT
PACKAGE_DIR = ROOT / "loaderx"
#: The subpackages of loaderx, every one a wheel carries (pyproject.toml lists the same).
SUBPACKAGES = ("store", "loader", "io", "remote", "integrations")
LICENSE = ROOT / "LICENSE"

#: The Zig toolchain release every wheel is built with (PyPI ``ziglang``).
ZIGLANG_VERSION = "0.17.1"

#: Symbols the Go runtime imports on macOS from libraries that zig does not
#: ship (it ships libSystem only): runtime/cgo links CoreFoundation on arm64,
#: internal/syscall/unix imports the res_9_* resolver from libresolv. The
#: linker needs a text stub (.tbd) for each; the real library is loaded at run
#: time from the install name below.
MACOS_STUBS = {
    "Frameworks/CoreFoundation.framework/CoreFoundation.tbd": (
        "/System/Library/Frameworks/CoreFoundation.framework/Versions/A/CoreFoundation",
        ["_CFRelease"],
    ),
    "lib/libresolv.tbd": (
        "/usr/lib/libresolv.9.dylib",
        ["_res_9_nclose", "_res_9_ninit", "_res_9_nsearch"],
    ),
}


@dataclass(frozen=True)
class Target:
    """One platform a wheel is built for."""

    platform: str  #: the wheel's platform tag
    goos: str
    goarch: str
    zig: str  #: the zig target triple, with the glibc / macOS minimum pinned
    sys_platform: str  #: the target's ``sys.platform`` (names the library)
    #: why the wheel is not built by default (empty: it is)
    blocked: str = ""

    @property
    def library(self) -> str:
        """The native library's file name on this target."""
        return build_native.library_filename(self.sys_platform)

    @property
    def header(self) -> str:
        """The cgo header's file name on this target."""
        return build_native.header_filename(self.sys_platform)

    @property
    def machine(self) -> str:
        """The instruction set the library is built for: ``x86_64`` or ``arm64``."""
        return {"amd64": "x86_64", "arm64": "arm64"}[self.goarch]

    @property
    def glibc_max(self) -> tuple[int, int] | None:
        """The newest glibc symbol version the tag allows (manylinux only)."""
        m = re.fullmatch(r"manylinux_(\d+)_(\d+)_\w+", self.platform)
        return (int(m.group(1)), int(m.group(2))) if m else None

    @property
    def macos_min(self) -> tuple[int, int] | None:
        """The minimum macOS the tag states (macOS only)."""
        m = re.fullmatch(r"macosx_(\d+)_(\d+)_\w+", self.platform)
        return (int(m.group(1)), int(m.group(2))) if m else None


#: Why no musllinux wheel is built by default: musl's dlopen refuses a Go
#: c-shared library, whose runtime uses initial-exec TLS ("initial-exec TLS
#: resolves to dynamic definition"; an open Go issue, golang/go#54805), so
#: Python on a musl system cannot load it. The wheel builds and passes its
#: file checks; python/abi_smoke.c shows the load failing.
MUSL_BLOCKED = (
    "musl cannot dlopen a Go c-shared library (initial-exec TLS, golang/go#54805)"
)

#: Every platform a wheel is published for, in order of value.
TARGETS: list[Target] = [
    Target("manylinux_2_17_x86_64", "linux", "amd64", "x86_64-linux-gnu.2.17", "linux"),
    Target(
        "manylinux_2_17_aarch64", "linux", "arm64", "aarch64-linux-gnu.2.17", "linux"
    ),
    Target(
        "musllinux_1_2_x86_64",
        "linux",
        "amd64",
        "x86_64-linux-musl",
        "linux",
        MUSL_BLOCKED,
    ),
    Target(
        "musllinux_1_2_aarch64",
        "linux",
        "arm64",
        "aarch64-linux-musl",
        "linux",
        MUSL_BLOCKED,
    ),
    Target("macosx_11_0_arm64", "darwin", "arm64", "aarch64-macos.11.0", "darwin"),
    Target("macosx_11_0_x86_64", "darwin", "amd64", "x86_64-macos.11.0", "darwin"),
    Target("win_amd64", "windows", "amd64", "x86_64-windows-gnu", "win32"),
    Target("win_arm64", "windows", "arm64", "aarch64-windows-gnu", "win32"),
]


class WheelError(Exception):
    """A wheel could not be built, or failed a check."""


# --------------------------------------------------------------------------
# metadata and names


def _pyproject() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib  # type: ignore[no-redef]
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def entry_points() -> str:
    """The wheel's entry_points.txt: the console scripts of pyproject.toml."""
    scripts = _pyproject()["project"].get("scripts", {})
    lines = ["[console_scripts]", *(f"{k} = {v}" for k, v in scripts.items())]
    return "\n".join(lines) + "\n"


def project_metadata() -> str:
    """The wheel's METADATA (core metadata 2.1), from pyproject.toml and README.md."""
    p = _pyproject()["project"]
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
        f"Summary: {p['description']}",
    ]
    authors = ", ".join(a["name"] for a in p.get("authors", []) if "name" in a)
    if authors:
        lines.append(f"Author: {authors}")
    lines.append(f"License: {p['license']['text']}")
    lines += [f"Classifier: {c}" for c in p.get("classifiers", [])]
    lines.append(f"Requires-Python: {p['requires-python']}")
    lines.append("Description-Content-Type: text/markdown")
    lines.append("License-File: LICENSE")
    lines += [f"Requires-Dist: {d}" for d in p.get("dependencies", [])]
    for extra, deps in p.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        for d in deps:
            req, _, marker = d.partition(";")
            cond = (
                f'({marker.strip()}) and extra == "{extra}"'
                if marker.strip()
                else f'extra == "{extra}"'
            )
            lines.append(f"Requires-Dist: {req.strip()}; {cond}")
    readme = (ROOT / p["readme"]).read_text(encoding="utf-8")
    return "\n".join(lines) + "\n\n" + readme


def project_version() -> tuple[str, str]:
    """The project's (name, version) from pyproject.toml."""
    p = _pyproject()["project"]
    return p["name"], p["version"]


def wheel_tag(target: Target) -> str:
    """The wheel tag of ``target``: any Python 3, no CPython ABI, its platform."""
    return f"py3-none-{target.platform}"


def wheel_name(target: Target) -> str:
    """The file name of ``target``'s wheel."""
    name, version = project_version()
    return f"{name.replace('-', '_')}-{version}-{wheel_tag(target)}.whl"


def package_files() -> list[Path]:
    """The pure-Python files of the package that every wheel carries."""
    files = sorted(PACKAGE_DIR.glob("*.py"))
    for sub in SUBPACKAGES:
        files += sorted((PACKAGE_DIR / sub).glob("*.py"))
    files.append(PACKAGE_DIR / "py.typed")
    return files


# --------------------------------------------------------------------------
# building


def zig_cc(target: Target) -> str:
    """The CC value for cgo: ``zig cc`` for ``target``'s triple."""
    return f"{sys.executable} -m ziglang cc -target {target.zig}"


def _check_zig() -> None:
    try:
        have = importlib.metadata.version("ziglang")
    except importlib.metadata.PackageNotFoundError:
        raise WheelError(
            f"the ziglang package is not installed: pip install ziglang=={ZIGLANG_VERSION}"
        ) from None
    if have != ZIGLANG_VERSION:
        raise WheelError(
            f"ziglang {have} is installed, the wheels are built with {ZIGLANG_VERSION}: "
            f"pip install ziglang=={ZIGLANG_VERSION}"
        )


def _macos_stubs(where: Path) -> list[str]:
    """Write the .tbd stubs of :data:`MACOS_STUBS` under ``where``; return linker flags."""
    for rel, (install_name, symbols) in MACOS_STUBS.items():
        path = where / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "--- !tapi-tbd\n"
            "tbd-version: 4\n"
            "targets: [ x86_64-macos, arm64-macos ]\n"
            f"install-name: '{install_name}'\n"
            "current-version: 1.0\n"
            "exports:\n"
            "  - targets: [ x86_64-macos, arm64-macos ]\n"
            f"    symbols: [ {', '.join(symbols)} ]\n"
            "...\n",
            encoding="utf-8",
        )
    return [f"-F{where / 'Frameworks'}", f"-L{where / 'lib'}"]


def strip_ldflags(target: Target) -> str:
    """The ``-ldflags`` that strip ``target``'s library.

    ``-s -w`` drops Go's symbol table and DWARF; with cgo the external linker
    (zig) does the final link and also keeps the C objects' symbols and debug
    sections unless told to strip (``-extldflags=-s``). On macOS the go
    command already passes the linker's strip flags (``-S -x``) for ``-s``.
    """
    if target.goos == "darwin":
        return "-s -w"
    return "-s -w -extldflags=-s"


def build_library(target: Target, out_dir: Path, *, verbose: bool = True) -> Path:
    """Cross-compile the stripped native library of ``target`` into ``out_dir``."""
    env = {
        "GOOS": target.goos,
        "GOARCH": target.goarch,
        "CGO_ENABLED": "1",
        "CC": zig_cc(target),
    }
    with tempfile.TemporaryDirectory(prefix="loaderx-stubs-") as stubs:
        if target.goos == "darwin":
            env["CGO_LDFLAGS"] = " ".join(_macos_stubs(Path(stubs)))
        try:
            return build_native.build(
                out_dir,
                verbose=verbose,
                env=env,
                platform=target.sys_platform,
                ldflags=strip_ldflags(target),
            )
        except RuntimeError as e:
            raise WheelError(f"{target.platform}: {e}") from None


def _record_line(arcname: str, data: bytes) -> str:
    digest = (
        base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    )
    return f"{arcname},sha256={digest},{len(data)}"


def pack_wheel(target: Target, lib_dir: Path, out_dir: Path) -> Path:
    """Pack the wheel of ``target`` from the built files in ``lib_dir``."""
    name, version = project_version()
    dist_info = f"{name.replace('-', '_')}-{version}.dist-info"
    if not LICENSE.is_file():
        raise WheelError(f"{LICENSE} is missing: every wheel carries the license")
    entries: list[tuple[str, bytes]] = []
    for f in package_files():
        entries.append((f.relative_to(ROOT).as_posix(), f.read_bytes()))
    for fname in (target.library, target.header, "cdef.h"):
        p = lib_dir / fname
        if not p.is_file():
            raise WheelError(f"{target.platform}: {p} was not built")
        entries.append((f"loaderx/lib/{fname}", p.read_bytes()))
    # the parsed declarations: optional, since the binding parses cdef.h
    # without them (only more slowly)
    if (lib_dir / "_lx_ffi.py").is_file():
        entries.append(("loaderx/lib/_lx_ffi.py", (lib_dir / "_lx_ffi.py").read_bytes()))
    entries.append((f"{dist_info}/LICENSE", LICENSE.read_bytes()))
    entries.append((f"{dist_info}/METADATA", project_metadata().encode()))
    wheel_meta = (
        "Wheel-Version: 1.0\n"
        "Generator: loaderx build_wheels.py\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {wheel_tag(target)}\n"
    )
    entries.append((f"{dist_info}/WHEEL", wheel_meta.encode()))
    entries.append((f"{dist_info}/top_level.txt", b"loaderx\n"))
    entries.append((f"{dist_info}/entry_points.txt", entry_points().encode()))
    record = [_record_line(a, d) for a, d in entries] + [f"{dist_info}/RECORD,,"]
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / wheel_name(target)
    tmp = path.with_suffix(".tmp")
    # fixed timestamps: the same inputs give the same wheel
    stamp = time.gmtime(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")))[:6]
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in entries:
            info = zipfile.ZipInfo(arcname, date_time=stamp)
            info.external_attr = (
                0o755 if arcname.endswith(target.library) else 0o644
            ) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(tmp, path)
    return path


def build_wheel(target: Target, out_dir: Path, *, verbose: bool = True) -> Path:
    """Build, pack and check the wheel of ``target``; return its path."""
    with tempfile.TemporaryDirectory(prefix=f"loaderx-{target.platform}-") as tmp:
        build_library(target, Path(tmp), verbose=verbose)
        path = pack_wheel(target, Path(tmp), out_dir)
    check_wheel(path)
    return path


# --------------------------------------------------------------------------
# checking

_ELF_MACHINES = {62: "x86_64", 183: "arm64"}
_MACHO_CPUS = {0x01000007: "x86_64", 0x0100000C: "arm64"}
_PE_MACHINES = {0x8664: "x86_64", 0xAA64: "arm64"}


def _target_of(path: Path) -> Target:
    m = re.fullmatch(
        r"(?P<dist>[^-]+)-(?P<ver>[^-]+)-py3-none-(?P<plat>\w+)\.whl", path.name
    )
    if not m:
        raise WheelError(f"{path.name}: not a py3-none-<platform> wheel name")
    for t in TARGETS:
        if t.platform == m.group("plat"):
            return t
    raise WheelError(f"{path.name}: unknown platform tag {m.group('plat')!r}")


def elf_info(data: bytes) -> dict:
    """Machine, stripping and dynamic dependencies of an ELF shared object.

    Returns ``machine`` (``x86_64``/``arm64``), ``symtab`` (whether a static
    symbol table is present), ``needed`` (DT_NEEDED names) and ``glibc``
    (the GLIBC_x.y versions its symbols require), parsed from the bytes.
    """
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise WheelError("not a 64-bit little-endian ELF file")
    machine = struct.unpack_from("<H", data, 18)[0]
    (shoff,) = struct.unpack_from("<Q", data, 40)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 58)
    sections = []
    for i in range(shnum):
        name, typ, _flags, _addr, off, size, link, _info, _align, entsize = (
            struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
        )
        sections.append((name, typ, off, size, link, entsize))

    def strat(sec: tuple, off: int) -> str:
        start = sec[2] + off
        return data[start : data.index(b"\0", start)].decode()

    shstr = sections[shstrndx]
    names = [strat(shstr, s[0]) for s in sections]
    info: dict = {
        "machine": _ELF_MACHINES.get(machine, f"e_machine {machine}"),
        "symtab": ".symtab" in names,
        "needed": [],
        "glibc": [],
    }
    for s in sections:
        if s[1] == 6:  # SHT_DYNAMIC
            dynstr = sections[s[4]]
            for j in range(0, s[3], 16):
                tag, val = struct.unpack_from("<qQ", data, s[2] + j)
                if tag == 1:  # DT_NEEDED
                    info["needed"].append(strat(dynstr, val))
        if s[1] == 0x6FFFFFFE:  # SHT_GNU_verneed
            strsec = sections[s[4]]
            off = s[2]
            while True:
                _ver, cnt, _file, aux, nxt = struct.unpack_from("<HHIII", data, off)
                a = off + aux
                for _ in range(cnt):
                    _hash, _fl, _other, vname, anext = struct.unpack_from(
                        "<IHHII", data, a
                    )
                    v = strat(strsec, vname)
                    if v.startswith("GLIBC_"):
                        info["glibc"].append(v)
                    a += anext
                if not nxt:
                    break
                off += nxt
    return info


def macho_info(data: bytes) -> dict:
    """Machine, minimum macOS, dylib dependencies and signature of a Mach-O file."""
    magic, cpu = struct.unpack_from("<II", data, 0)
    if magic != 0xFEEDFACF:
        raise WheelError("not a 64-bit Mach-O file")
    (ncmds,) = struct.unpack_from("<I", data, 16)
    off = 32
    info: dict = {
        "machine": _MACHO_CPUS.get(cpu, f"cputype {cpu:#x}"),
        "minos": None,
        "dylibs": [],
        "signed": False,
        "symbols": 0,
    }
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", data, off)
        if cmd == 0x32:  # LC_BUILD_VERSION
            _plat, minos = struct.unpack_from("<II", data, off + 8)
            info["minos"] = (minos >> 16, (minos >> 8) & 0xFF)
        elif cmd == 0x24:  # LC_VERSION_MIN_MACOSX
            (v,) = struct.unpack_from("<I", data, off + 8)
            info["minos"] = (v >> 16, (v >> 8) & 0xFF)
        elif cmd in (0xC, 0x80000018):  # LC_LOAD_DYLIB, LC_LOAD_WEAK_DYLIB
            (name_off,) = struct.unpack_from("<I", data, off + 8)
            raw = data[off + name_off : off + size]
            info["dylibs"].append(raw.split(b"\0", 1)[0].decode())
        elif cmd == 0x1D:  # LC_CODE_SIGNATURE
            info["signed"] = True
        elif cmd == 0x2:  # LC_SYMTAB
            (info["symbols"],) = struct.unpack_from("<I", data, off + 12)
        off += size
    return info


def pe_info(data: bytes) -> dict:
    """Machine, DLL flag, COFF symbol count and imported DLLs of a PE file."""
    if data[:2] != b"MZ":
        raise WheelError("not a PE file")
    (pe,) = struct.unpack_from("<I", data, 0x3C)
    if data[pe : pe + 4] != b"PE\0\0":
        raise WheelError("no PE signature")
    machine, nsec, _ts, _symptr, nsyms, optsize, chars = struct.unpack_from(
        "<HHIIIHH", data, pe + 4
    )
    opt = pe + 24
    (magic,) = struct.unpack_from("<H", data, opt)
    if magic != 0x20B:
        raise WheelError("not a PE32+ (64-bit) image")
    sec_tab = opt + optsize
    secs = [struct.unpack_from("<8sIIII", data, sec_tab + 40 * i) for i in range(nsec)]

    def rva_to_off(rva: int) -> int:
        for _n, vsize, vaddr, rawsize, rawptr in secs:
            if vaddr <= rva < vaddr + max(vsize, rawsize):
                return rawptr + rva - vaddr
        raise WheelError(f"RVA {rva:#x} outside every section")

    imp_rva, _imp_size = struct.unpack_from(
        "<II", data, opt + 112 + 8
    )  # data directory 1
    dlls = []
    if imp_rva:
        off = rva_to_off(imp_rva)
        while True:
            name_rva = struct.unpack_from("<IIIII", data, off)[3]
            if not name_rva:
                break
            n = rva_to_off(name_rva)
            dlls.append(data[n : data.index(b"\0", n)].decode())
            off += 20
    return {
        "machine": _PE_MACHINES.get(machine, f"machine {machine:#x}"),
        "dll": bool(chars & 0x2000),
        "symbols": nsyms,
        "imports": dlls,
    }


def _auditwheel(path: Path) -> str | None:
    exe = shutil.which("auditwheel")
    if not exe:
        return None
    proc = subprocess.run(
        [exe, "show", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise WheelError(f"{path.name}: auditwheel show failed:\n{proc.stdout}")
    return " ".join(proc.stdout.split())


def _tag_within(found: str, tag: str) -> bool:
    """Whether auditwheel's tag ``found`` is as old as ``tag`` or older (same family and arch)."""
    pat = r"(manylinux|musllinux)_(\d+)_(\d+)_(\w+)"
    f, t = re.fullmatch(pat, found), re.fullmatch(pat, tag)
    if not f or not t:
        return found == tag
    return (f.group(1), f.group(4)) == (t.group(1), t.group(4)) and (
        int(f.group(2)),
        int(f.group(3)),
    ) <= (int(t.group(2)), int(t.group(3)))


def check_wheel(path: Path, *, use_auditwheel: bool = True) -> list[str]:
    """Check one built wheel from its bytes; return what was checked.

    Raises :class:`WheelError` naming the wheel and the check that failed.
    """
    path = Path(path)
    target = _target_of(path)
    done: list[str] = []
    name, version = project_version()
    dist_info = f"{name.replace('-', '_')}-{version}.dist-info"
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        wheel_meta = z.read(f"{dist_info}/WHEEL").decode()
        metadata = z.read(f"{dist_info}/METADATA").decode()
        ep_name = f"{dist_info}/entry_points.txt"
        eps = z.read(ep_name).decode() if ep_name in names else ""
        libs = [n for n in names if re.search(r"\.(so|dylib|dll|pyd)(\.|$)", n)]
        if libs != [f"loaderx/lib/{target.library}"]:
            raise WheelError(
                f"{path.name}: native libraries {libs}, expected exactly loaderx/lib/{target.library}"
            )
        lib = z.read(libs[0])
        for need in (
            "loaderx/__init__.py",
            *(f"loaderx/{sub}/__init__.py" for sub in SUBPACKAGES),
            "loaderx/store/_native.py",
            "loaderx/lib/cdef.h",
            f"{dist_info}/LICENSE",
            f"{dist_info}/RECORD",
        ):
            if need not in names:
                raise WheelError(f"{path.name}: {need} is missing")
        record = z.read(f"{dist_info}/RECORD").decode().splitlines()
        for line in record:
            arc, digest, _size = line.rsplit(",", 2)
            if digest and _record_line(arc, z.read(arc)) != line:
                raise WheelError(f"{path.name}: RECORD does not match {arc}")
    tags = re.findall(r"^Tag: (.+)$", wheel_meta, re.MULTILINE)
    if tags != [wheel_tag(target)]:
        raise WheelError(
            f"{path.name}: WHEEL says tags {tags}, expected {wheel_tag(target)}"
        )
    scripts = _pyproject()["project"].get("scripts", {})
    if scripts:
        for k, v in scripts.items():
            if f"{k} = {v}" not in eps:
                raise WheelError(f"{path.name}: entry_points.txt lacks the console script {k!r}")
    if "Root-Is-Purelib: false" not in wheel_meta:
        raise WheelError(f"{path.name}: WHEEL must say Root-Is-Purelib: false")
    for field in (f"Name: {name}", f"Version: {version}", "License: MIT"):
        if f"\n{field}\n" not in metadata:
            raise WheelError(f"{path.name}: METADATA lacks {field!r}")
    done.append(
        f"files: one library ({target.library}), LICENSE, METADATA, RECORD hashes; tag {wheel_tag(target)}"
    )

    if target.goos == "linux":
        info = elf_info(lib)
        if info["machine"] != target.machine:
            raise WheelError(
                f"{path.name}: library is {info['machine']}, tag says {target.machine}"
            )
        if info["symtab"]:
            raise WheelError(f"{path.name}: library is not stripped (.symtab present)")
        musl = target.platform.startswith("musllinux")
        if musl:
            if info["glibc"] or "libc.so.6" in info["needed"]:
                raise WheelError(
                    f"{path.name}: musl library links glibc ({info['needed']}, {info['glibc']})"
                )
            if "libc.so" not in info["needed"]:
                raise WheelError(
                    f"{path.name}: musl library does not need libc.so ({info['needed']})"
                )
            done.append(
                f"ELF {info['machine']}, stripped, needs {info['needed']} (musl)"
            )
        else:
            vers = sorted(
                {tuple(int(x) for x in v[6:].split(".")) for v in info["glibc"]}
            )
            newest = vers[-1] if vers else (0, 0)
            if newest > target.glibc_max:
                raise WheelError(
                    f"{path.name}: needs GLIBC_{'.'.join(map(str, newest))}, "
                    f"newer than the tag's {target.glibc_max}"
                )
            done.append(
                f"ELF {info['machine']}, stripped, newest symbol version GLIBC_{'.'.join(map(str, newest))}"
                f" <= {'.'.join(map(str, target.glibc_max))}, needs {info['needed']}"
            )
        if musl:
            # auditwheel classifies by the libc of the machine it runs on: on
            # a glibc host it resolves the wheel's libc.so to glibc's linker
            # script and fails, so musllinux wheels are left to the ELF
            # checks above unless this runs on a musl host.
            done.append("auditwheel show: not run for musllinux on a glibc host")
        elif use_auditwheel:
            out = _auditwheel(path)
            if out is None:
                done.append("auditwheel: not installed, skipped")
            else:
                m = re.search(
                    r'consistent with the following platform tag: "?(\w+)"?', out
                )
                if not m or not _tag_within(m.group(1), target.platform):
                    raise WheelError(f"{path.name}: auditwheel show disagrees: {out}")
                done.append(
                    f"auditwheel show: consistent with {m.group(1)} (at least as old as the tag)"
                )
    elif target.goos == "darwin":
        info = macho_info(lib)
        if info["machine"] != target.machine:
            raise WheelError(
                f"{path.name}: library is {info['machine']}, tag says {target.machine}"
            )
        if info["minos"] is None or info["minos"] > target.macos_min:
            raise WheelError(
                f"{path.name}: minimum macOS {info['minos']}, tag says {target.macos_min}"
            )
        if target.goarch == "arm64" and not info["signed"]:
            raise WheelError(
                f"{path.name}: arm64 library has no code signature (macOS refuses to load it)"
            )
        allowed = {"/usr/lib/libSystem.B.dylib"} | {v[0] for v in MACOS_STUBS.values()}
        extra = set(info["dylibs"]) - allowed
        if extra:
            raise WheelError(
                f"{path.name}: library links {sorted(extra)}, which a stock macOS may lack"
            )
        done.append(
            f"Mach-O {info['machine']}, minos {info['minos'][0]}.{info['minos'][1]}, "
            f"signed={info['signed']}, links {info['dylibs']}"
        )
    else:
        info = pe_info(lib)
        if info["machine"] != target.machine:
            raise WheelError(
                f"{path.name}: library is {info['machine']}, tag says {target.machine}"
            )
        if not info["dll"]:
            raise WheelError(f"{path.name}: {target.library} is not a DLL")
        if info["symbols"]:
            raise WheelError(
                f"{path.name}: DLL is not stripped ({info['symbols']} COFF symbols)"
            )
        done.append(f"PE {info['machine']} DLL, stripped, imports {info['imports']}")
    return done


# --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--out", default=str(ROOT / "dist"), help="where the wheels go (default dist/)"
    )
    ap.add_argument(
        "--only",
        action="append",
        metavar="TAG",
        help="build only this platform tag (repeatable)",
    )
    ap.add_argument(
        "--check-only", action="store_true", help="check the wheels already in --out"
    )
    ap.add_argument(
        "--print-zig-pin",
        action="store_true",
        help="print the pinned ziglang version and exit",
    )
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.print_zig_pin:
        print(ZIGLANG_VERSION)
        return 0
    targets = TARGETS
    if args.only:
        unknown = set(args.only) - {t.platform for t in TARGETS}
        if unknown:
            print(
                f"build_wheels: unknown platform tag(s) {sorted(unknown)}",
                file=sys.stderr,
            )
            return 2
        targets = [t for t in TARGETS if t.platform in args.only]
    else:
        for t in TARGETS:
            if t.blocked:
                print(
                    f"skip {t.platform}: {t.blocked} (build it with --only {t.platform})"
                )
        targets = [t for t in TARGETS if not t.blocked]
    out = Path(args.out)
    failed: list[str] = []
    if not args.check_only:
        try:
            _check_zig()
        except WheelError as e:
            print(f"build_wheels: {e}", file=sys.stderr)
            return 1
    for t in targets:
        start = time.monotonic()
        try:
            if args.check_only:
                path = out / wheel_name(t)
                if not path.is_file():
                    raise WheelError(f"{path} does not exist")
            else:
                path = build_wheel(t, out, verbose=not args.quiet)
            checks = check_wheel(path)
        except (WheelError, OSError, ValueError) as e:
            failed.append(t.platform)
            print(f"FAIL {t.platform}: {e}", file=sys.stderr)
            continue
        print(
            f"ok   {path.name}  {path.stat().st_size} bytes  ({time.monotonic() - start:.0f} s)"
        )
        for c in checks:
            print(f"       {c}")
    if failed:
        print(f"build_wheels: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
