"""The documentation site, built and opened in a real browser.

The site is built with ``mkdocs build --strict`` (as ``make docs`` does) into
a temporary directory, served over HTTP from this process (the search runs in
a web worker, which a ``file://`` page may not start) and opened in headless
Chromium, Debian's ``chromium`` package that ``make setup`` installs, driven
over the DevTools protocol. It checks that every page renders its article;
that the search index and the rendered search both find ``pack=``; that the
API reference has an entry for every public name (each of ``loaderx.__all__``
and each name in the ``__all__`` of every module a reference page documents),
with a signature for the functions and the classes other than exceptions;
that each public face's docstring, what ``help()`` shows, is the
documentation and reads the same on its reference page; and that the strict
build refuses what it must: a broken anchor and a docstring that does not
match its signature. Screenshots of the home page, the packing guide and the
search are written to ``$LOADERX_DOCS_SCREENSHOTS`` when that is set.
"""

from __future__ import annotations

import ast
import base64
import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import loaderx

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
if not (ROOT / "mkdocs.yml").is_file() or not (ROOT / "zrecord" / "doc.go").is_file():
    pytest.skip("the site's sources are not beside the tests (a run against an installed wheel)",
                allow_module_level=True)

mkdocs = pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
websocket = pytest.importorskip("websocket", reason="websocket-client is not installed (the docs extra)")
yaml = pytest.importorskip("yaml")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          cwd=config.parent, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    res = build(ROOT / "mkdocs.yml", out)
    assert res.returncode == 0, f"mkdocs build --strict failed:\n{res.stderr[-4000:]}"
    return out


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server(site: Path) -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


class Browser:
    """One headless Chromium, one tab, driven over the DevTools protocol."""

    def __init__(self) -> None:
        assert CHROMIUM
        self.profile = tempfile.mkdtemp(prefix="loaderx-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 60
        browser_url = None
        for line in self.proc.stderr:
            if "DevTools listening on" in line:
                browser_url = line.split(" on ", 1)[1].strip()
                break
            if time.monotonic() > deadline:
                break
        if browser_url is None:
            self.close()
            raise AssertionError("chromium did not start its DevTools endpoint")
        # keep draining stderr, so that chromium never blocks on a full pipe
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()
        port = urllib.parse.urlparse(browser_url).port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json") as r:
            pages = [t for t in json.load(r) if t["type"] == "page"]
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], suppress_origin=True, timeout=60)
        self.next_id = 0
        self.call("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                assert "error" not in msg, f"{method}: {msg['error']}"
                return msg["result"]

    def eval(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in res, f"{expression}: {res['exceptionDetails']}"
        return res["result"].get("value")

    def wait(self, expression: str, timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = self.eval(expression)
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.05)

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)
        assert self.wait(f"document.readyState === 'complete' && location.href === {json.dumps(url)}"), url

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (make setup installs Debian's chromium)")
    b = Browser()
    try:
        yield b
    finally:
        b.close()


def page_urls(site: Path, base: str) -> list[str]:
    return [base + p.relative_to(site).parent.as_posix().removeprefix(".") + ("/" if p.parent != site else "")
            for p in sorted(site.rglob("index.html")) if "assets" not in p.parts]


def test_every_page_renders(site: Path, server: str, browser: Browser) -> None:
    urls = page_urls(site, server)
    pages = {p.relative_to(DOCS).with_suffix("").as_posix() for p in DOCS.rglob("*.md")}
    assert len(urls) == len(pages) >= 30, (urls, pages)
    for url in urls:
        browser.open(url)
        article = browser.eval("""(() => {
            const a = document.querySelector('article.md-content__inner');
            if (!a) return null;
            return {h1: (a.querySelector('h1') || {}).textContent || '', text: a.innerText.length,
                    nav: document.querySelectorAll('nav.md-nav--primary a.md-nav__link').length,
                    width: a.getBoundingClientRect().width};
        })()""")
        assert article, f"{url}: no article rendered"
        assert article["h1"].strip(), f"{url}: the page has no title"
        assert article["text"] > 300, f"{url}: the article is nearly empty ({article['text']} characters)"
        assert article["nav"] >= 30, f"{url}: the navigation lists {article['nav']} links"
        assert article["width"] > 400, f"{url}: the article is {article['width']} px wide"
        assert "Material for MkDocs" in browser.eval("document.querySelector('footer').innerText")


def test_search_finds_pack(site: Path, server: str, browser: Browser) -> None:
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    hits = {d["location"].split("#")[0] for d in index["docs"] if "pack=" in d["text"]}
    assert "guides/packing/" in hits and "reference/dataloader/" in hits, sorted(hits)

    browser.open(server + "guides/reading/?q=pack%3D")
    count = browser.wait("document.querySelectorAll('.md-search-result__item').length")
    assert count, "the rendered search shows no result for pack="
    links = browser.eval("[...document.querySelectorAll('.md-search-result__item a')].map(a => a.href)")
    assert any("/guides/packing/" in link for link in links), links
    meta = browser.eval("document.querySelector('.md-search-result__meta').textContent")
    assert "matching document" in meta, meta
    shots = os.environ.get("LOADERX_DOCS_SCREENSHOTS")
    if shots:
        browser.screenshot(Path(shots) / "docs-search.png")


def _module_all(module: str) -> list[str]:
    """The ``__all__`` of a loaderx module, read from its source (the torch, jax and
    ray faces import their frameworks)."""
    path = ROOT / (module.replace(".", "/") + ".py")
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{module} has no __all__")


def _reference_modules() -> dict[str, str]:
    """{module: reference page} for every page that documents one module."""
    out = {}
    for page in sorted((DOCS / "reference").glob("*.md")):
        first = page.read_text(encoding="utf-8").splitlines()[0]
        if first.startswith("::: "):
            out[first[4:].strip()] = page.stem
    return out


def test_reference_has_every_public_name(site: Path, server: str, browser: Browser) -> None:
    modules = _reference_modules()
    assert {"loaderx.converter", "loaderx.dataset", "loaderx.dataloader", "loaderx.packing", "loaderx.mixture",
            "loaderx.torch", "loaderx.jax", "loaderx.ray", "loaderx.errors"} <= set(modules)
    expected: dict[str, list[str]] = {}  # page -> ids
    for name in loaderx.__all__:
        module = loaderx._EXPORTS.get(name)
        if module is not None:
            assert module in modules, f"{name} lives in {module}, which has no reference page"
            expected.setdefault(modules[module], []).append(f"{module}.{name}")
        elif name == "errors":
            expected.setdefault("errors", []).append("loaderx.errors")
        else:
            expected.setdefault("index", []).append(f"loaderx.{name}")
    for module, page in modules.items():
        names = ["main", "EXIT_CODES"] if module == "loaderx.cli" else _module_all(module)
        expected.setdefault(page, []).extend(f"{module}.{n}" for n in names)
    for page, ids in sorted(expected.items()):
        browser.open(server + ("reference/" if page == "index" else f"reference/{page}/"))
        found = browser.eval(f"""(() => {{
            const out = {{}};
            for (const id of {json.dumps(sorted(set(ids)))}) {{
                const h = document.getElementById(id);
                if (!h) {{ out[id] = null; continue; }}
                const body = h.closest('.doc-object') || h.parentElement;
                out[id] = {{kind: [...body.classList].join(' '), text: body.innerText.length,
                           signature: !!body.querySelector('.doc-signature')}};
            }}
            return out;
        }})()""")
        missing = [i for i, v in found.items() if v is None]
        assert not missing, f"reference/{page}: no entry for {missing}"
        for ident, entry in found.items():
            assert entry["text"] > 40, f"reference/{page}: the entry of {ident} is empty"
            callable_ = "doc-function" in entry["kind"] or (
                "doc-class" in entry["kind"] and not ident.endswith(("Error", "Warning")))  # exceptions take a message
            if callable_:
                assert entry["signature"], f"reference/{page}: {ident} has no signature"


def test_screenshots(server: str, browser: Browser, tmp_path: Path) -> None:
    out = Path(os.environ.get("LOADERX_DOCS_SCREENSHOTS") or tmp_path)
    for name, url in (("docs-home.png", ""), ("docs-packing.png", "guides/packing/")):
        browser.open(server + url)
        browser.wait("document.fonts.status === 'loaded'")
        browser.screenshot(out / name)
        png = (out / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000, f"{name}: {len(png)} bytes"


BAD_MODULE = '''"""A module whose docstring does not match its signature."""


def scale(x: float) -> float:
    """Scale a number.

    Args:
        y: not a parameter of this function.
    """
    return x * 2
'''


def test_strict_build_refuses_broken_links_and_docstrings(tmp_path: Path) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    (tmp_path / "docs").mkdir()
    (tmp_path / "badmod.py").write_text(BAD_MODULE)
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [the API](api.md#no-such-anchor).\n")
    (tmp_path / "docs" / "api.md").write_text("# API\n\n::: badmod\n")
    config.update(docs_dir="docs", nav=[{"Home": "index.md"}, {"API": "api.md"}])
    config.pop("hooks", None)
    for plugin in config["plugins"]:  # the site's griffe extension, from the checkout
        if isinstance(plugin, dict) and "mkdocstrings" in plugin:
            options = plugin["mkdocstrings"]["handlers"]["python"]["options"]
            options["extensions"] = [str(ROOT / e) for e in options.get("extensions", [])]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    res = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert res.returncode != 0
    assert "no-such-anchor" in res.stderr, res.stderr[-3000:]
    assert "Parameter 'y' does not appear in the function signature" in res.stderr, res.stderr[-3000:]
    # and the same site without the two faults builds
    (tmp_path / "docs" / "index.md").write_text("# Home\n\nSee [the API](api.md).\n")
    (tmp_path / "badmod.py").write_text(BAD_MODULE.replace("y: not", "x: the"))
    res = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert res.returncode == 0, res.stderr[-3000:]


def _face_docstrings() -> dict[str, str]:
    """{module: what help() shows as its docstring} for every public face (a
    module of the package's top level that re-exports from a subpackage and
    appends that module's docstring to its own), read from the sources (the
    torch, jax and ray faces import their frameworks)."""
    import re

    out = {}
    for path in sorted((ROOT / "loaderx").glob("*.py")):
        source = path.read_text(encoding="utf-8")
        impl = re.search(r"^import (loaderx(?:\.\w+)+) as _impl$", source, re.M)
        if impl is None or "__doc__ = f" not in source:
            continue
        inner = ROOT / (impl.group(1).replace(".", "/") + ".py")
        own = ast.get_docstring(ast.parse(source)) or ""
        behind = ast.get_docstring(ast.parse(inner.read_text(encoding="utf-8"))) or ""
        out[f"loaderx.{path.stem}"] = f"{own}\n\n{behind}"
    return out


def test_help_and_the_reference_say_the_same(site: Path) -> None:
    """help(loaderx.packing) shows the documentation, not a near-empty face, and
    the reference page shows the same text."""
    import html
    import re

    faces = _face_docstrings()
    assert {"loaderx.packing", "loaderx.mixture", "loaderx.dataset", "loaderx.dataloader"} <= set(faces)
    pages = {m: p for m, p in _reference_modules().items()}
    for module, doc in faces.items():
        paragraphs = [p for p in doc.split("\n\n") if p.strip() and not p.startswith((" ", "*", "-"))]
        assert len(doc) > 400 and len(paragraphs) >= 3, f"{module}'s docstring is a near-empty face:\n{doc}"
        text = re.sub(r"<[^>]+>", " ", (site / "reference" / pages[module] / "index.html").read_text(encoding="utf-8"))
        text = "".join(html.unescape(text).split())  # compared without spaces: tags leave some
        for para in paragraphs[1:4] + paragraphs[-2:]:
            words = re.sub(r":\w+:`~?([^`]+)`", r"\1", para).replace("``", "").replace("*", "").split()[:8]
            assert "".join(words) in text, f"reference/{pages[module]} lacks {' '.join(words)!r} of {module}'s help()"
    import pydoc

    import loaderx.packing

    assert "first_fit" in pydoc.render_doc(loaderx.packing) and "segment_ids" in pydoc.render_doc(loaderx.packing)
