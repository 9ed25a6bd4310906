"""The cffi declarations must match the header that go build emits.

The header (libloaderx.h, beside the loaded library) is parsed here on its own
terms: its typedefs are resolved from the header text, not from the build
script's table, and every type is reduced to what a call depends on (pointer
depth, integer width and signedness, char, void, floating point). Each lx_*
prototype must then agree, in name, number of arguments and every argument and
result type, with the function cffi declares in loaderx.store._native. Anything
declared on one side only is drift too.

The same goes for the ABI's numbers (the LX_* #defines and enum lx_* types of
capi's cgo preamble): every one must have the header's value in the library
object cffi built, and every table loaderx.store._native derives from them (status
exceptions, codec names, sampler modes, stats fields, the sample-spec layout,
the limits) must say what the header says.
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
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_DEFINE = re.compile(r"^\s*#\s*define\s+(LX_\w+)\s+(\S+)\s*$", re.M)
_ENUM = re.compile(r"\benum\s+(lx_\w+)\s*\{([^}]*)\}\s*;")

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


def test_binding_uses_the_parsed_declarations(native: ModuleType) -> None:
    """The build's out-of-line cffi module is what the binding loaded (parsing
    cdef.h instead costs every process some 50 ms), and it was made from
    this cdef.h."""
    lib_dir = Path(native.library_path).parent
    module = (lib_dir / "_lx_ffi.py").read_text(encoding="utf-8")
    cdef = (lib_dir / "cdef.h").read_text(encoding="utf-8")
    import hashlib

    assert f"CDEF_SHA256 = {hashlib.sha256(cdef.encode()).hexdigest()!r}" in module
    assert not isinstance(native.ffi, cffi.FFI), "the binding parsed cdef.h instead of importing _lx_ffi.py"


@pytest.mark.parametrize("damage", ["stale", "garbage", "missing"])
def test_declarations_fall_back_to_cdef(native: ModuleType, tmp_path: Path, damage: str) -> None:
    """A module made from other declarations, a damaged one, or none: the
    binding parses cdef.h, and gets the same declarations."""
    lib_dir = Path(native.library_path).parent
    cdef = (lib_dir / "cdef.h").read_text(encoding="utf-8")
    module = (lib_dir / "_lx_ffi.py").read_text(encoding="utf-8")
    if damage == "stale":
        (tmp_path / "_lx_ffi.py").write_text(re.sub(r"CDEF_SHA256 = '[0-9a-f]+'", "CDEF_SHA256 = '00'", module))
    elif damage == "garbage":
        (tmp_path / "_lx_ffi.py").write_text(module[: len(module) // 2])
    got = native._parsed_ffi(str(tmp_path), cdef)
    assert isinstance(got, cffi.FFI)
    lib = got.dlopen(native.library_path)
    for name in ("lx_store_gather", "lx_store_open", "lx_abi_version"):
        assert got.typeof(getattr(lib, name)).cname == native.ffi.typeof(getattr(native.lib, name)).cname


def test_binding_calls_only_exported_functions(header_text: str) -> None:
    source = (ROOT / "loaderx" / "store" / "_native.py").read_text(encoding="utf-8")
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


# --- the ABI's numbers ---------------------------------------------------------------


def header_numbers(header: str) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """The LX_* #defines ({name: value}) and enum lx_* types ({enum: {member: value}})
    of a header, parsed here independently of the build script."""
    text = _COMMENT.sub("", header)
    defines = {name: int(value, 0) for name, value in _DEFINE.findall(text)}
    enums: dict[str, dict[str, int]] = {}
    for name, body in _ENUM.findall(text):
        members, value = {}, 0
        for item in filter(None, (x.strip() for x in body.split(","))):
            member, _, given = (s.strip() for s in item.partition("="))
            value = int(given, 0) if given else value
            members[member] = value
            value += 1
        enums[name] = members
    return defines, enums


def number_drift(header: str, ffi: cffi.FFI, lib: Any) -> list[str]:
    """Every LX_* number on which the header and the library object disagree."""
    defines, enums = header_numbers(header)
    expected = dict(defines)
    for members in enums.values():
        expected.update(members)
    problems = []
    declared = {name for name in dir(lib) if name.startswith("LX_")}
    for name in sorted(expected.keys() - declared):
        problems.append(f"{name}: in the header but not in the library object")
    for name in sorted(declared - expected.keys()):
        problems.append(f"{name}: in the library object but not in the header")
    for name in sorted(expected.keys() & declared):
        if getattr(lib, name) != expected[name]:
            problems.append(f"{name}: {getattr(lib, name)} in the library object, {expected[name]} in the header")
    for name, members in enums.items():
        try:
            got = ffi.typeof(f"enum {name}").relements
        except ffi.error:
            problems.append(f"enum {name}: not declared")
            continue
        if dict(got) != members:
            problems.append(f"enum {name}: declared {dict(got)}, the header says {members}")
    return problems


def _names(members: dict[str, int], prefix: str, end: str | None = None) -> list[str]:
    """Lower-cased member names after prefix, in value order, below end's value."""
    limit = members[end] if end else None
    return [
        m[len(prefix):].lower()
        for m, v in sorted(members.items(), key=lambda kv: kv[1])
        if m != end and (limit is None or v < limit)
    ]


def binding_drift(header: str, native: ModuleType) -> list[str]:
    """Every table of loaderx.store._native that does not say what the header says."""
    defines, enums = header_numbers(header)
    problems = []

    def check(what: str, got: Any, want: Any) -> None:
        if got != want:
            problems.append(f"{what}: the binding has {got!r}, the header says {want!r}")

    check("ABI version", native.ABI_VERSION, defines.get("LX_ABI_VERSION"))
    check("MAX_DIMS", native.MAX_DIMS, defines.get("LX_MAX_DIMS"))
    check("MAX_RECORD_SIZE", native.MAX_RECORD_SIZE, defines.get("LX_MAX_RECORD_SIZE"))
    status = enums.get("lx_status", {})
    check("LX_OK (the binding treats any nonzero status as failure)", status.get("LX_OK"), 0)
    for member, value in status.items():
        check(f"status {member}", getattr(native, member[len("LX_"):], None), value)
    check("statuses with an exception", sorted(native.STATUS_EXCEPTIONS), sorted(v for v in status.values() if v))
    check("exception table", len(native._EXCEPTIONS), max(status.values(), default=0) + 1)
    check("codec names", list(native.CODEC_NAMES), _names(enums.get("lx_codec", {}), "LX_CODEC_"))
    check("codec tags", list(range(len(native.CODEC_NAMES))), sorted(enums.get("lx_codec", {}).values()))
    modes = enums.get("lx_sampler_mode", {})
    check("sampler modes", native.SAMPLER_MODES, {m[len("LX_MODE_"):].lower(): v for m, v in modes.items()})
    stat = enums.get("lx_stat", {"LX_STATS_LEN": 0})
    check("stats fields", list(native.STATS_FIELDS), _names(stat, "LX_STAT_", "LX_STATS_LEN"))
    check("stats count", len(native.STATS_FIELDS), stat["LX_STATS_LEN"])
    spec = enums.get("lx_sample_spec", {"LX_SPEC_LEN": 0})
    check("sample-spec fields", list(native.SAMPLE_SPEC_FIELDS), _names(spec, "LX_SPEC_", "LX_SPEC_LEN"))
    check("sample-spec bytes", native._SAMPLE_SPEC.size, 8 * spec["LX_SPEC_LEN"])
    seed = spec.get("LX_SPEC_SEED", -1)
    check("sample-spec seed slot (unsigned)", native._SAMPLE_SPEC.format.lstrip("=@<>!")[seed : seed + 1], "Q")
    return problems


def test_numbers_match_header(native: ModuleType, header_text: str) -> None:
    defines, enums = header_numbers(header_text)
    assert {"LX_ABI_VERSION", "LX_MAX_DIMS", "LX_MAX_RECORD_SIZE"} <= defines.keys()
    assert {"lx_status", "lx_codec", "lx_sampler_mode", "lx_stat", "lx_sample_spec"} <= enums.keys()
    assert number_drift(header_text, native.ffi, native.lib) == []
    assert binding_drift(header_text, native) == []


def test_number_drift_is_detected(native: ModuleType, header_text: str) -> None:
    cases = {
        "changed define": ("#define LX_MAX_DIMS 64", "#define LX_MAX_DIMS 32"),
        "changed status": ("LX_EXISTS = 9", "LX_EXISTS = 10"),
        "new status": ("LX_EXISTS = 9", "LX_EXISTS = 9,\n\tLX_FULL = 10"),
        "renumbered codec": ("LX_CODEC_ZSTD = 1", "LX_CODEC_ZSTD = 5"),
        "reordered stats": ("LX_STAT_CODEC = 4", "LX_STAT_CODEC = 7"),
        "longer spec": ("LX_SPEC_LEN = 8", "LX_SPEC_LEN = 9"),
        "new mode": ("LX_MODE_CYCLIC = 2", "LX_MODE_CYCLIC = 2,\n\tLX_MODE_STRIDED = 3"),
    }
    for what, (old, new) in cases.items():
        assert old in header_text, f"{what}: {old!r} not in the header"
        changed = header_text.replace(old, new, 1)
        assert number_drift(changed, native.ffi, native.lib), what
        assert binding_drift(changed, native), what
    extra = header_text.replace("#define LX_MAX_DIMS", "#define LX_MAX_SHARDS 8\n#define LX_MAX_DIMS", 1)
    assert any("LX_MAX_SHARDS" in p for p in number_drift(extra, native.ffi, native.lib))


def test_build_script_reads_numbers(build_native: ModuleType, tmp_path: Path) -> None:
    header = (
        "extern int lx_a(int x);\n"
        "#define LX_ABI_VERSION 7 // the version\n#define LX_GUARD\n"
        "enum lx_e {\n\tLX_E_A = 2, /* two */\n\tLX_E_B,\n\tLX_E_C = 9\n};\n"
    )
    assert build_native.extract_cdef(header).splitlines()[1:] == [
        "int lx_a(int x);",
        "#define LX_ABI_VERSION 7",
        "enum lx_e { LX_E_A = 2, LX_E_B = 3, LX_E_C = 9 };",
    ]
    (tmp_path / "old.h").write_text("extern int lx_a(int x);\n")
    with pytest.raises(ValueError, match="LX_ABI_VERSION"):
        build_native.write_cdef(tmp_path / "old.h", tmp_path / "cdef.h")
    with pytest.raises(ValueError, match="member"):
        build_native.extract_cdef("extern int lx_a(int x);\n#define LX_ABI_VERSION 1\nenum lx_e { LX_A = 1 << 2 };\n")
