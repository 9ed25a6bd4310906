#!/usr/bin/env python3
"""Build the loaderx native library and its cffi declarations.

    python3 python/build_native.py [OUT_DIR]

runs ``go build -buildmode=c-shared`` on ``./capi`` and writes, into OUT_DIR
(default ``loaderx/lib``):

* ``libloaderx.so`` (``.dylib`` on macOS, ``loaderx.dll`` on Windows),
* ``libloaderx.h``, the header that cgo emits,
* ``cdef.h``, the ``lx_*`` prototypes of that header in the plain C that
  cffi parses (cgo's own typedefs mapped to ``<stdint.h>`` types), followed
  by the ABI's numbers: the ``#define LX_*`` integer constants and the
  ``enum lx_*`` types that ``capi``'s cgo preamble defines and cgo copies
  into the header. The header is the single source of truth:
  ``loaderx/store/_native.py`` declares exactly what ``cdef.h`` says and reads the
  numbers from the loaded library, and ``tests/test_cdef.py`` checks the
  two agree;
* ``_lx_ffi.py``, those declarations parsed once by cffi into its
  out-of-line ABI module, stamped with the SHA-256 of ``cdef.h``: a process
  that loads the library imports it in about a millisecond, where parsing
  ``cdef.h`` with pycparser costs some 50 ms in every process (every worker
  and rank). The binding falls back to parsing ``cdef.h`` when the module is
  missing, stale or refused by the installed cffi.

Environment: ``GO`` names the go command (default ``go`` on PATH);
``GOFLAGS`` and the rest of the Go environment are passed through.
Importable: :func:`build` is what setup.py and the Makefile call.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "loaderx" / "lib"
PACKAGE = "./capi"

#: cgo's fixed-width typedefs and the <stdint.h> types they stand for.
GO_TYPES = {
    "GoInt8": "int8_t",
    "GoUint8": "uint8_t",
    "GoInt16": "int16_t",
    "GoUint16": "uint16_t",
    "GoInt32": "int32_t",
    "GoUint32": "uint32_t",
    "GoInt64": "int64_t",
    "GoUint64": "uint64_t",
    "GoUintptr": "uintptr_t",
    "GoFloat32": "float",
    "GoFloat64": "double",
}

#: cgo types that have no plain-C equivalent cffi could call with.
UNSUPPORTED = ("GoString", "GoSlice", "GoInterface", "GoMap", "GoChan", "GoComplex64", "GoComplex128", "_GoString_")

_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(LX_\w+)[ \t]+(\d+)[ \t]*$", re.M)
_ENUM = re.compile(r"^[ \t]*enum[ \t]+(lx_\w+)[ \t]*\{(?P<body>[^}]*)\}[ \t]*;", re.M)
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)

_PROTO = re.compile(
    r"^extern[ \t]+(?P<ret>[^;(\n]*?)[ \t]*\b(?P<name>lx_\w+)[ \t]*\((?P<args>[^)\n]*)\)[ \t]*;", re.M
)


def library_filename(platform: str = sys.platform) -> str:
    """The file name of the shared library on ``platform``."""
    if platform == "darwin":
        return "libloaderx.dylib"
    if platform == "win32":
        return "loaderx.dll"
    return "libloaderx.so"


def header_filename(platform: str = sys.platform) -> str:
    """The file name of the header cgo emits beside the library."""
    return os.path.splitext(library_filename(platform))[0] + ".h"


def _go_int_width(header: str) -> dict[str, str]:
    """Map GoInt and GoUint to the width this header gives them."""
    types = {}
    for signed, name in (("Int", "GoInt"), ("Uint", "GoUint")):
        m = re.search(rf"typedef\s+Go{signed}(\d+)\s+{name}\s*;", header)
        if m:
            types[name] = GO_TYPES[f"Go{signed}{m.group(1)}"]
    return types


def _map_type(ctype: str, types: dict[str, str], where: str) -> str:
    """Rewrite one C type from the header into plain C."""
    for bad in UNSUPPORTED:
        if re.search(rf"\b{bad}\b", ctype):
            raise ValueError(f"{where}: type {ctype!r} has no plain-C form; export C types only")

    def sub(m: re.Match[str]) -> str:
        return types.get(m.group(0), m.group(0))

    ctype = re.sub(r"\bGo\w+\b", sub, ctype)
    ctype = re.sub(r"\s*\*\s*", "* ", ctype).strip()
    ctype = re.sub(r"\s+", " ", ctype).replace("* *", "**")
    if re.search(r"\bGo\w+\b", ctype):
        raise ValueError(f"{where}: unknown Go type in {ctype!r}")
    return ctype


def prototypes(header: str) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """The ``lx_*`` prototypes of a cgo header, in plain C.

    Returns ``(return type, name, [(parameter type, parameter name), ...])``
    per export, in header order.
    """
    types = dict(GO_TYPES)
    types.update(_go_int_width(header))
    protos = []
    for m in _PROTO.finditer(header):
        name = m.group("name")
        ret = _map_type(m.group("ret"), types, name)
        params: list[tuple[str, str]] = []
        args = m.group("args").strip()
        if args and args != "void":
            for i, arg in enumerate(args.split(",")):
                pm = re.fullmatch(r"\s*(.*?[\s*])(\w+)\s*", arg)
                if not pm:
                    raise ValueError(f"{name}: cannot parse parameter {i} {arg!r}")
                params.append((_map_type(pm.group(1), types, f"{name} parameter {pm.group(2)}"), pm.group(2)))
        protos.append((ret, name, params))
    if not protos:
        raise ValueError("no lx_* prototypes found in the header")
    return protos


def constants(header: str) -> tuple[dict[str, int], dict[str, list[tuple[str, int]]]]:
    """The ABI's numbers in a cgo header.

    Returns the ``#define LX_* <integer>`` constants as ``{name: value}`` and
    the ``enum lx_*`` types as ``{enum name: [(member, value), ...]}``, the
    members in declaration order with implicit values filled in.
    """
    text = _COMMENT.sub("", header)
    defines: dict[str, int] = {}
    for name, value in _DEFINE.findall(text):
        if defines.setdefault(name, int(value)) != int(value):
            raise ValueError(f"#define {name} has two values in the header")
    enums: dict[str, list[tuple[str, int]]] = {}
    for m in _ENUM.finditer(text):
        name, members, nxt = m.group(1), [], 0
        for i, item in enumerate(x.strip() for x in m.group("body").split(",")):
            if not item:
                continue
            em = re.fullmatch(r"(LX_\w+)\s*(?:=\s*(\d+))?", item)
            if not em:
                raise ValueError(f"enum {name}: cannot parse member {i} {item!r}; use LX_NAME = <decimal>")
            nxt = int(em.group(2)) if em.group(2) is not None else nxt
            members.append((em.group(1), nxt))
            nxt += 1
        if name in enums and enums[name] != members:
            raise ValueError(f"enum {name} is declared twice, differently")
        enums[name] = members
    return defines, enums


def extract_cdef(header: str) -> str:
    """The cffi declarations (``cdef.h``) for a cgo header."""
    lines = [
        "/* Generated by python/build_native.py from the header go build emits. Do not edit. */",
    ]
    for ret, name, params in prototypes(header):
        args = ", ".join(f"{t} {n}" for t, n in params) or "void"
        lines.append(f"{ret} {name}({args});")
    defines, enums = constants(header)
    for name, value in defines.items():
        lines.append(f"#define {name} {value}")
    for name, members in enums.items():
        body = ", ".join(f"{member} = {value}" for member, value in members)
        lines.append(f"enum {name} {{ {body} }};")
    return "\n".join(lines) + "\n"


def write_cdef(header_path: str | os.PathLike[str], cdef_path: str | os.PathLike[str]) -> None:
    """Generate ``cdef_path`` from the header at ``header_path``."""
    text = Path(header_path).read_text(encoding="utf-8")
    if "LX_ABI_VERSION" not in constants(text)[0]:
        raise ValueError(f"{header_path}: no #define LX_ABI_VERSION: the ABI's constants are missing")
    Path(cdef_path).write_text(extract_cdef(text), encoding="utf-8")


#: the name of the out-of-line cffi module (the file ``{FFI_MODULE}.py``)
FFI_MODULE = "_lx_ffi"


def write_ffi_module(cdef_path: str | os.PathLike[str], module_path: str | os.PathLike[str]) -> None:
    """Generate the out-of-line cffi ABI module at ``module_path`` from the
    declarations at ``cdef_path``, with a line ``CDEF_SHA256 = "..."`` that
    names the declarations it was made from."""
    import hashlib

    from cffi import FFI

    cdef = Path(cdef_path).read_text(encoding="utf-8")
    builder = FFI()
    builder.cdef(cdef)
    builder.set_source(FFI_MODULE, None)
    builder.emit_python_code(str(module_path))
    digest = hashlib.sha256(cdef.encode("utf-8")).hexdigest()
    with open(module_path, "a", encoding="utf-8") as f:
        f.write(f"\n# the SHA-256 of the cdef.h these declarations were parsed from\nCDEF_SHA256 = {digest!r}\n")


def build(
    out_dir: str | os.PathLike[str] | None = None,
    *,
    verbose: bool = True,
    env: dict[str, str] | None = None,
    platform: str = sys.platform,
    ldflags: str | None = None,
) -> Path:
    """Build the shared library, its header, cdef.h and the cffi module into
    ``out_dir``.

    The files are built in a temporary directory inside ``out_dir`` and then
    moved into place, so a process that has the old library loaded keeps a
    consistent mapping. ``env`` adds to (overrides) the environment of
    ``go build`` (GOOS, GOARCH, CC, ... for a cross build), ``platform`` is
    the ``sys.platform`` value of the target (it names the library file), and
    ``ldflags`` is passed as ``-ldflags`` (``-s -w`` strips the library).
    Returns the path of the library. Raises
    ``RuntimeError`` when ``go`` is missing or the build fails.
    """
    out = Path(out_dir) if out_dir is not None else DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    go = os.environ.get("GO") or shutil.which("go")
    if not go:
        raise RuntimeError("the go command was not found: install Go 1.25 or newer, or set GO to its path")
    lib_name, header_name = library_filename(platform), header_filename(platform)
    env = {**os.environ, "CGO_ENABLED": "1", **(env or {})}
    with tempfile.TemporaryDirectory(prefix=".build-", dir=out) as tmp:
        cmd = [go, "build", "-buildmode=c-shared", "-trimpath", "-o", os.path.join(tmp, lib_name), PACKAGE]
        if ldflags is not None:
            cmd[3:3] = [f"-ldflags={ldflags}"]
        if verbose:
            print(" ".join(cmd), file=sys.stderr)
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"go build failed ({proc.returncode}):\n{proc.stdout}")
        write_cdef(os.path.join(tmp, header_name), os.path.join(tmp, "cdef.h"))
        write_ffi_module(os.path.join(tmp, "cdef.h"), os.path.join(tmp, FFI_MODULE + ".py"))
        for name in (header_name, "cdef.h", FFI_MODULE + ".py", lib_name):  # the library last
            os.replace(os.path.join(tmp, name), out / name)
    return out / lib_name


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or (args and args[0] in ("-h", "--help")):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        path = build(args[0] if args else None)
    except (RuntimeError, ValueError, OSError) as e:
        print(f"build_native: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
