"""The cffi declarations must match the header that go build emits.

The header (libloaderx.h, beside the loaded library) is parsed here on its own
terms: its typedefs are resolved from the header text, not from the build
script's table, and every type is reduced to what a call depends on (pointer
depth, integer width and signedness, char, void, floating point). Each lx_*
prototype must then agree, in name, number of arguments and every argument and
result type, with the function cffi declares in loaderx._native. Anything
declared on one side only is drift too.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Any

import cffi
import pytest

ROOT = Path(__file__).resolve().parent.parent
_TYPEDEF = re.compile(r"^typedef\s+([A-Za-z_][\w\s]*?)\s+(\w+)\s*;", re.M)
_EXPORT = re.compile(r"^extern\s+([^(\n]+?)\s*\b(lx_\w+)\s*\(([^)\n]*)\)\s*;", re.M)
_PLAIN = cffi.FFI()

Canon = tuple[Any, ...]


def canon_ctype(ffi: cffi.FFI, t: Any) -> Canon:
    """What a call depends on in a cffi ctype."""
    if t.kind == "pointer":
        return ("ptr", canon_ctype(ffi, t.item))
    if t.kind == "void":
        return ("void",)
    if t.kind == "primitive":
        if t.cname == "char":
            return ("char",)
        if t.cname in ("float", "double", "long double"):
            return ("float", ffi.sizeof(t))
        return ("int", ffi.sizeof(t), bool(ffi.cast(t, -1) < 0))
    return (t.kind, t.cname)


def resolve(ctype: str, typedefs: dict[str, str]) -> str:
    """Replace typedef names in a C type by what the header defines them as."""
    for _ in range(10):
        new = re.sub(r"\b\w+\b", lambda m: typedefs.get(m.group(0), m.group(0)), ctype)
        if new == ctype:
            return ctype
        ctype = new
    raise AssertionError(f"typedef loop in {ctype!r}")


def header_prototypes(header: str) -> dict[str, tuple[Canon, list[Canon]]]:
    """name -> (result, [argument types]) for every lx_* export of a cgo header."""
    typedefs = {name: base for base, name in _TYPEDEF.findall(header) if "struct" not in base}
    protos = {}
    for ret, name, args in _EXPORT.findall(header):
        params = []
        args = args.strip()
        if args and args != "void":
            for arg in args.split(","):
                m = re.fullmatch(r"\s*(.*?[\s*])\w+\s*", arg)
                assert m, f"{name}: cannot parse parameter {arg!r}"
                params.append(canon_ctype(_PLAIN, _PLAIN.typeof(resolve(m.group(1).strip(), typedefs))))
        assert name not in protos, f"{name} declared twice"
        result = _PLAIN.typeof(resolve(ret.replace("extern", "").strip(), typedefs))
        protos[name] = (canon_ctype(_PLAIN, result), params)
    return protos


def declared_prototypes(ffi: cffi.FFI, lib: Any) -> dict[str, tuple[Canon, list[Canon]]]:
    """name -> (result, [argument types]) for every lx_* function cffi declares."""
    protos = {}
    for name in dir(lib):
        if not name.startswith("lx_"):
            continue
        t = ffi.typeof(getattr(lib, name))
        assert t.kind == "function" and not t.ellipsis, f"{name} is declared as {t}"
        protos[name] = (canon_ctype(ffi, t.result), [canon_ctype(ffi, a) for a in t.args])
    return protos


def drift(header: dict[str, tuple[Canon, list[Canon]]], declared: dict[str, tuple[Canon, list[Canon]]]) -> list[str]:
    """Every disagreement between the header and the declarations."""
    problems = []
    for name in sorted(header.keys() - declared.keys()):
        problems.append(f"{name}: exported by the library but not declared")
    for name in sorted(declared.keys() - header.keys()):
        problems.append(f"{name}: declared but not exported by the library")
    for name in sorted(header.keys() & declared.keys()):
        (hret, hargs), (dret, dargs) = header[name], declared[name]
        if hret != dret:
            problems.append(f"{name}: result {dret} declared, {hret} exported")
        if len(hargs) != len(dargs):
            problems.append(f"{name}: {len(dargs)} arguments declared, {len(hargs)} exported")
            continue
        for i, (h, d) in enumerate(zip(hargs, dargs)):
            if h != d:
                problems.append(f"{name}: argument {i} is {d} declared, {h} exported")
    return problems


@pytest.fixture(scope="module")
def header_text(native: ModuleType, build_native: ModuleType) -> str:
    path = Path(native.library_path).with_name(build_native.header_filename())
    if not path.exists():
        pytest.fail(f"no header beside the library: {path}")
    return path.read_text(encoding="utf-8")


def test_declarations_match_header(native: ModuleType, header_text: str) -> None:
    header = header_prototypes(header_text)
    assert "lx_store_gather" in header and len(header) >= 20
    assert drift(header, declared_prototypes(native.ffi, native.lib)) == []


def test_cdef_is_current(native: ModuleType, build_native: ModuleType, header_text: str) -> None:
    """cdef.h is exactly what the build script makes of this header."""
    cdef = Path(native.library_path).with_name("cdef.h").read_text(encoding="utf-8")
    assert cdef == build_native.extract_cdef(header_text)


def test_binding_calls_only_exported_functions(header_text: str) -> None:
    source = (ROOT / "loaderx" / "_native.py").read_text(encoding="utf-8")
    used = set(re.findall(r"\blib\.(lx_\w+)", source))
    assert used, "the binding calls no lx_* function?"
    assert used - header_prototypes(header_text).keys() == set()


def test_drift_is_detected(native: ModuleType, header_text: str) -> None:
    declared = declared_prototypes(native.ffi, native.lib)
    cases = {
        "narrowed argument": ("int64_t errLen);", "int32_t errLen);"),
        "pointer to value": ("lx_store_len(int64_t h, int64_t* length,", "lx_store_len(int64_t h, int64_t length,"),
        "extra argument": ("lx_store_sync(int64_t h,", "lx_store_sync(int64_t h, int64_t flags,"),
        "renamed export": ("lx_store_compact(", "lx_store_compact2("),
        "result type": ("extern int lx_get_threads(", "extern int64_t lx_get_threads("),
        "signedness": ("int lx_store_close(int64_t h,", "int lx_store_close(uint64_t h,"),
    }
    for what, (old, new) in cases.items():
        assert old in header_text, f"{what}: {old!r} not in the header"
        assert drift(header_prototypes(header_text.replace(old, new, 1)), declared), what
    new_export = header_text.replace(
        "extern int lx_store_sync(", "extern int lx_store_reopen(int64_t h);\nextern int lx_store_sync(", 1
    )
    assert any("lx_store_reopen" in p for p in drift(header_prototypes(new_export), declared))


def test_go_typedefs_are_mapped(build_native: ModuleType) -> None:
    header = (
        "typedef long long GoInt64;\ntypedef GoInt64 GoInt;\ntypedef unsigned char GoUint8;\n"
        "typedef unsigned long long GoUint64;\ntypedef GoUint64 GoUint;\n"
        "extern GoInt lx_a(GoUint8* p, GoInt n, GoUint u, double d);\n"
        "extern void lx_b(void);\n"
    )
    assert build_native.extract_cdef(header).splitlines()[1:] == [
        "int64_t lx_a(uint8_t* p, int64_t n, uint64_t u, double d);",
        "void lx_b(void);",
    ]
    with pytest.raises(ValueError, match="GoString"):
        build_native.extract_cdef("extern int lx_c(GoString s);\n")
    with pytest.raises(ValueError, match="no lx_"):
        build_native.extract_cdef("extern int other(int x);\n")
