"""Cheap invariants of the packaging: the sdist's file list, the wheel tags
and their checks, the metadata, and the clear failure of a source build
without Go or a C compiler. Nothing here cross-compiles or needs the network
(`make wheels` and `make wheels-check` do the expensive part)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_build_wheels() -> ModuleType:
    name = "loaderx_build_wheels"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "python" / "build_wheels.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bw = _load_build_wheels()

PLATFORMS = [
    "manylinux_2_17_x86_64",
    "manylinux_2_17_aarch64",
    "musllinux_1_2_x86_64",
    "musllinux_1_2_aarch64",
    "macosx_11_0_arm64",
    "macosx_11_0_x86_64",
    "win_amd64",
    "win_arm64",
]


def _go_directive() -> tuple[int, int]:
    m = re.search(r"^go (\d+)\.(\d+)", (ROOT / "go.mod").read_text(), re.MULTILINE)
    assert m, "go.mod has no go directive"
    return int(m.group(1)), int(m.group(2))


# -- the sdist -----------------------------------------------------------------


@pytest.fixture(scope="module")
def sdist_files(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The files of a freshly built sdist, relative to its top directory."""
    out = tmp_path_factory.mktemp("sdist")
    if importlib.util.find_spec("build") is not None:
        cmd = [
            sys.executable,
            "-m",
            "build",
            "--sdist",
            "--no-isolation",
            "--skip-dependency-check",
            "-o",
            str(out),
        ]
    else:
        cmd = [sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(out)]
    proc = subprocess.run(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    (tarball,) = out.glob("loaderx-*.tar.gz")
    with tarfile.open(tarball) as t:
        names = [m.name for m in t.getmembers() if m.isfile()]
    return {n.split("/", 1)[1] for n in names}


def test_sdist_carries_every_go_source(sdist_files: set[str]) -> None:
    # every package of the module, a new one included (the library links
    # them all): the top-level directories that hold Go files
    dirs = {p.relative_to(ROOT).parts[0] for p in ROOT.glob("*/**/*.go")} - {"build", "dist", ".git"}
    assert {"capi", "zrecord", "zsampler"} <= dirs, dirs
    go_files = {str(p.relative_to(ROOT)) for d in dirs for p in (ROOT / d).rglob("*.go")}
    assert go_files, "no Go sources found in the checkout"
    missing = sorted(go_files - sdist_files)
    assert not missing, f"the sdist lacks Go sources: {missing}"
    for need in (
        "go.mod",
        "go.sum",
        "LICENSE",
        "README.md",
        "setup.py",
        "pyproject.toml",
        "MANIFEST.in",
        "python/build_native.py",
        "python/build_wheels.py",
        "python/abi_smoke.c",
        "loaderx/py.typed",
    ):
        assert need in sdist_files, f"the sdist lacks {need}"
    py = {p.relative_to(ROOT).as_posix() for p in (ROOT / "loaderx").rglob("*.py") if "lib" not in p.relative_to(ROOT / "loaderx").parts[:1]}
    assert py <= sdist_files, f"the sdist lacks {sorted(py - sdist_files)}"


def test_sdist_carries_no_built_library(sdist_files: set[str]) -> None:
    built = [
        n
        for n in sdist_files
        if re.search(r"\.(so|dylib|dll|pyc)$", n)
        or n.endswith(("cdef.h", "_lx_ffi.py"))
        or "__pycache__" in n
        or n.startswith(("build/", "dist/"))
    ]
    assert not built, f"the sdist carries build outputs: {built}"


# -- wheel tags ----------------------------------------------------------------


def test_targets_are_the_published_platforms_in_order() -> None:
    assert [t.platform for t in bw.TARGETS] == PLATFORMS
    # musl's dlopen cannot load a Go c-shared library: not built by default
    assert [t.platform for t in bw.TARGETS if t.blocked] == [
        "musllinux_1_2_x86_64",
        "musllinux_1_2_aarch64",
    ]


@pytest.mark.parametrize("target", bw.TARGETS, ids=lambda t: t.platform)
def test_wheel_name_and_tag(target: bw.Target) -> None:
    import loaderx

    assert bw.wheel_tag(target) == f"py3-none-{target.platform}"
    assert (
        bw.wheel_name(target)
        == f"loaderx-{loaderx.__version__}-py3-none-{target.platform}.whl"
    )
    arch = {"amd64": ("x86_64", "amd64"), "arm64": ("aarch64", "arm64")}[target.goarch]
    assert target.platform.endswith(arch), (
        f"{target.platform} does not name GOARCH {target.goarch}"
    )
    assert target.zig.split("-")[0] in ("x86_64", "aarch64")
    assert target.zig.startswith({"amd64": "x86_64", "arm64": "aarch64"}[target.goarch])
    # the minimum the tag states is pinned in the zig triple
    if target.platform.startswith("manylinux"):
        assert target.glibc_max == (2, 17)
        assert target.zig.endswith("-linux-gnu.2.17")
        assert target.library == "libloaderx.so"
    elif target.platform.startswith("musllinux"):
        assert target.zig.endswith("-linux-musl")
        assert target.library == "libloaderx.so"
    elif target.platform.startswith("macosx"):
        assert target.macos_min == (11, 0)
        assert target.zig.endswith("-macos.11.0")
        assert target.library == "libloaderx.dylib"
        assert bw.strip_ldflags(target) == "-s -w"
    else:
        assert target.zig.endswith("-windows-gnu")
        assert target.library == "loaderx.dll"
    if target.goos != "darwin":
        assert bw.strip_ldflags(target) == "-s -w -extldflags=-s"


def test_auditwheel_tag_comparison() -> None:
    assert bw._tag_within("manylinux_2_5_x86_64", "manylinux_2_17_x86_64")
    assert bw._tag_within("manylinux_2_17_x86_64", "manylinux_2_17_x86_64")
    assert not bw._tag_within("manylinux_2_34_x86_64", "manylinux_2_17_x86_64")
    assert not bw._tag_within("manylinux_2_5_aarch64", "manylinux_2_17_x86_64")
    assert not bw._tag_within("linux_x86_64", "manylinux_2_17_x86_64")


def _host_lib_dir() -> Path:
    lib = ROOT / "loaderx" / "lib"
    if not (lib / "libloaderx.so").is_file() or sys.platform != "linux":
        pytest.skip("needs the Linux library built in loaderx/lib")
    return lib


def _target(platform: str) -> bw.Target:
    return next(t for t in bw.TARGETS if t.platform == platform)


def test_packed_wheel_layout(tmp_path: Path) -> None:
    """A packed wheel carries the package, one library, LICENSE and metadata;
    the check rejects a library built for the host without stripping."""
    lib = _host_lib_dir()
    target = _target("manylinux_2_17_x86_64")
    path = bw.pack_wheel(target, lib, tmp_path)
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        wheel_meta = z.read("loaderx-0.1.0.dist-info/WHEEL").decode()
    assert {
        "loaderx/__init__.py",
        "loaderx/store/_native.py",
        "loaderx/py.typed",
        "loaderx/lib/libloaderx.so",
        "loaderx/lib/cdef.h",
        "loaderx/lib/_lx_ffi.py",
        "loaderx-0.1.0.dist-info/LICENSE",
        "loaderx-0.1.0.dist-info/METADATA",
        "loaderx-0.1.0.dist-info/RECORD",
    } <= names
    assert not [n for n in names if "__pycache__" in n or ".build-" in n]
    # every module of the package and of its subpackages, and nothing else
    package = ROOT / "loaderx"
    modules = {p.relative_to(ROOT).as_posix() for p in package.rglob("*.py") if p.relative_to(package).parts[0] != "lib"}
    assert {n for n in names if n.endswith(".py")} == modules | {"loaderx/lib/_lx_ffi.py"}
    assert {"loaderx/store/converter.py", "loaderx/loader/_procpool.py", "loaderx/io/arrow.py"} <= modules
    assert "Tag: py3-none-manylinux_2_17_x86_64\n" in wheel_meta
    info = bw.elf_info((lib / "libloaderx.so").read_bytes())
    assert info["machine"] == "x86_64"
    if info["symtab"]:  # the ordinary development build is not stripped
        with pytest.raises(bw.WheelError, match="not stripped"):
            bw.check_wheel(path, use_auditwheel=False)


def test_check_rejects_a_library_of_another_platform(tmp_path: Path) -> None:
    lib = _host_lib_dir()
    # an ELF packed under a macOS tag, named as the dylib
    fake = tmp_path / "lib"
    fake.mkdir()
    shutil.copy(lib / "libloaderx.so", fake / "libloaderx.dylib")
    shutil.copy(lib / "libloaderx.h", fake / "libloaderx.h")
    shutil.copy(lib / "cdef.h", fake / "cdef.h")
    path = bw.pack_wheel(_target("macosx_11_0_arm64"), fake, tmp_path / "dist")
    with pytest.raises(bw.WheelError, match="Mach-O"):
        bw.check_wheel(path)
    # an x86-64 ELF under an aarch64 tag
    path = bw.pack_wheel(_target("manylinux_2_17_aarch64"), lib, tmp_path / "dist")
    with pytest.raises(bw.WheelError, match="x86_64, tag says arm64"):
        bw.check_wheel(path, use_auditwheel=False)


# -- metadata ------------------------------------------------------------------


def test_metadata() -> None:
    import loaderx

    meta = bw.project_metadata()
    head, _, body = meta.partition("\n\n")
    fields = head.splitlines()
    assert "Name: loaderx" in fields
    assert f"Version: {loaderx.__version__}" in fields
    assert "License: MIT" in fields
    assert "License-File: LICENSE" in fields
    assert "Requires-Python: >=3.11" in fields
    requires = [f for f in fields if f.startswith("Requires-Dist: ")]
    assert (
        "Requires-Dist: cffi>=1.15" in requires
        and "Requires-Dist: numpy>=1.22" in requires
    )
    assert all(
        "extra ==" in r
        for r in requires
        if not r.startswith(("Requires-Dist: cffi", "Requires-Dist: numpy"))
    )
    assert not [
        f for f in fields if "free-thread" in f.lower() or "Py_GIL_DISABLED" in f
    ]
    assert body.startswith("# "), "the long description is the README"
    assert "MIT License" in (ROOT / "LICENSE").read_text()


def test_setup_states_the_go_minimum_of_go_mod() -> None:
    text = (ROOT / "setup.py").read_text()
    m = re.search(r'GO_MIN = "(\d+)\.(\d+)"', text)
    assert m and (int(m.group(1)), int(m.group(2))) == _go_directive()


def _setup_build(
    tmp_path: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("GO", "CC", "PATH")}
    base.update(env)
    return subprocess.run(
        [
            sys.executable,
            "setup.py",
            "-q",
            "build_py",
            "--build-lib",
            str(tmp_path / "lib"),
        ],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_source_build_without_go_fails_in_one_sentence(tmp_path: Path) -> None:
    proc = _setup_build(tmp_path, {"PATH": str(tmp_path / "nowhere")})
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("loaderx:")]
    assert len(lines) == 1 and "no go command was found" in lines[0], proc.stderr


def test_source_build_without_c_compiler_fails_in_one_sentence(tmp_path: Path) -> None:
    go = shutil.which("go")
    if not go:
        pytest.skip("needs go")
    proc = _setup_build(
        tmp_path,
        {
            "PATH": os.environ.get("PATH", ""),
            "GO": go,
            "CC": str(tmp_path / "no-such-cc"),
        },
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("loaderx:")]
    assert len(lines) == 1 and "needs a C compiler" in lines[0], proc.stderr


def test_a_build_drops_modules_an_earlier_build_left(tmp_path: Path) -> None:
    """setuptools keeps build/lib between builds; a module moved or removed
    since the last build must not ship in the next wheel."""
    if shutil.which("go") is None:
        pytest.skip("go is not installed")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "go.mod", "go.sum"):
        shutil.copy(ROOT / name, src / name)
    for name in ("loaderx", "python", "capi", "zrecord", "zsampler", "steppipe", "steppack"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "lib", "testdata"))
    stale = src / "build" / "lib" / "loaderx" / "_moved_away.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("raise ImportError('a module of an earlier build')\n")
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", "build/lib"],
                          cwd=src, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not stale.exists()
    assert (src / "build" / "lib" / "loaderx" / "loader" / "mixture.py").is_file()
    assert list((src / "build" / "lib" / "loaderx" / "lib").glob("libloaderx.*"))
