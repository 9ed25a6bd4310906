"""A fault-injecting HTTP/1.1 proxy for the object-storage tests.

:class:`FaultProxy` listens on 127.0.0.1 and forwards every connection to
an upstream server (the suite's S3 server, tests/s3server.py). It reads
whole requests and whole responses (``Content-Length`` or chunked bodies),
so a fault can be aimed at one kind of answer: a range read of a chunk page,
the whole-object download of ``meta.zr``, a listing. Rules are added with
:meth:`FaultProxy.add` and apply to the next ``times`` requests they match,
in the order added; a request no rule matches passes through unchanged.

The faults, each what a flaky network or server does:

* ``reset``: the client's connection is reset (RST) before any answer;
* ``stall``: nothing is answered for ``seconds``, then the connection closes;
* ``truncate``: the head and part of the body, then a clean close (FIN);
* ``short``: the body cut and ``Content-Length`` rewritten to match, so the
  answer looks whole;
* ``status``: an S3 error answer with HTTP ``code`` (500, 503) instead;
* ``latency``: the real answer after ``seconds``;
* ``flip``: one byte of the body inverted (at ``offset``, default the middle).

The proxy counts what it did (:attr:`FaultProxy.applied`). It runs on
threads of the process that makes it and stops with :meth:`close`; every
socket it holds has a timeout, so a test never hangs on it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import socket
import struct
import threading
import time
from typing import Any

#: seconds any proxy socket waits on a read before the connection is dropped
IDLE = 30.0


@dataclasses.dataclass
class Rule:
    """One fault: ``kind`` (see the module's docstring) for the next
    ``times`` requests whose method is ``method`` (None: any) and whose
    target matches the regular expression ``path`` (None: any); with
    ``ranged`` True only range reads, False only reads of whole objects."""

    kind: str
    path: str | None = None
    method: str | None = "GET"
    ranged: bool | None = None
    times: int = 1
    seconds: float = 0.0
    code: int = 503
    offset: int | None = None
    hits: int = 0

    def matches(self, method: str, target: str, headers: dict[str, str]) -> bool:
        if self.times <= 0:
            return False
        if self.method is not None and method != self.method:
            return False
        if self.path is not None and not re.search(self.path, target.split("?", 1)[0]):
            return False
        return self.ranged is None or self.ranged == ("range" in headers)


class _Closed(Exception):
    """The peer closed the connection (or it timed out)."""


def _recv_more(sock: socket.socket, buf: bytearray) -> None:
    """Append what the socket has next to buf; _Closed when it has nothing."""
    try:
        got = sock.recv(65536)
    except OSError:
        raise _Closed from None
    if not got:
        raise _Closed
    buf += got


def _read_until(sock: socket.socket, buf: bytearray, mark: bytes, limit: int | None = None) -> bytes:
    """The bytes of buf and the socket up to and including mark (taken out
    of buf); _Closed past limit bytes without it."""
    while True:
        end = buf.find(mark)
        if end >= 0:
            out = bytes(buf[: end + len(mark)])
            del buf[: end + len(mark)]
            return out
        _recv_more(sock, buf)
        if limit is not None and len(buf) > limit:
            raise _Closed


def _read_head(sock: socket.socket, buf: bytearray) -> bytes:
    return _read_until(sock, buf, b"\r\n\r\n", 1 << 20)


def _read_exact(sock: socket.socket, buf: bytearray, n: int) -> bytes:
    while len(buf) < n:
        try:
            got = sock.recv(max(65536, n - len(buf)))
        except OSError:
            raise _Closed from None
        if not got:
            raise _Closed
        buf += got
    out = bytes(buf[:n])
    del buf[:n]
    return out


def _read_line(sock: socket.socket, buf: bytearray) -> bytes:
    return _read_until(sock, buf, b"\r\n")


def _parse(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return lines[0], headers


def _read_body(sock: socket.socket, buf: bytearray, headers: dict[str, str], no_body: bool) -> bytes:
    """The body of a message (de-chunked), by its headers."""
    if no_body:
        return b""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        while True:
            size = int(_read_line(sock, buf).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while _read_line(sock, buf) != b"\r\n":  # trailers
                    pass
                return b"".join(parts)
            parts.append(_read_exact(sock, buf, size))
            _read_exact(sock, buf, 2)
    return _read_exact(sock, buf, int(headers.get("content-length", "0") or 0))


def _with_length(head: bytes, n: int) -> bytes:
    """``head`` with its body framing replaced by ``Content-Length: n``."""
    lines = head.decode("latin-1").split("\r\n")
    kept = [ln for ln in lines[1:] if ln and not ln.lower().startswith(("content-length:", "transfer-encoding:"))]
    return ("\r\n".join([lines[0], *kept, f"Content-Length: {n}"]) + "\r\n\r\n").encode("latin-1")


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with an RST instead of a FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class FaultProxy:
    """A proxy from ``endpoint`` (``http://127.0.0.1:PORT``) to ``upstream``."""

    def __init__(self, upstream: str) -> None:
        m = re.fullmatch(r"http://([^:/]+):(\d+)/?", upstream)
        if not m:
            raise ValueError(f"upstream must be http://HOST:PORT, got {upstream!r}")
        self.upstream = (m.group(1), int(m.group(2)))
        self.rules: list[Rule] = []
        self.applied: dict[str, int] = {}
        self.requests = 0
        self._mu = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self.port = self._listener.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._closed = False
        self._thread = threading.Thread(target=self._accept, name="faultproxy", daemon=True)
        self._thread.start()

    # rules

    def add(self, kind: str, **kw: Any) -> Rule:
        rule = Rule(kind, **kw)
        with self._mu:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._mu:
            self.rules.clear()

    def _take(self, method: str, target: str, headers: dict[str, str]) -> Rule | None:
        with self._mu:
            self.requests += 1
            for rule in self.rules:
                if rule.matches(method, target, headers):
                    rule.times -= 1
                    rule.hits += 1
                    self.applied[rule.kind] = self.applied.get(rule.kind, 0) + 1
                    return rule
        return None

    # serving

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            client.settimeout(IDLE)
            with self._mu:
                self._conns.add(client)
            threading.Thread(target=self._serve, args=(client,), name="faultproxy-conn", daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        up: socket.socket | None = None
        cbuf, ubuf = bytearray(), bytearray()
        try:
            while True:
                head = _read_head(client, cbuf)
                line, headers = _parse(head)
                method, target = (line.split(" ") + ["", ""])[:2]
                body = _read_body(client, cbuf, headers, False)
                rule = self._take(method, target, headers)
                if rule is not None and rule.kind == "reset":
                    _reset(client)
                    return
                if rule is not None and rule.kind == "stall":
                    self._sleep(rule.seconds)
                    return
                if rule is not None and rule.kind == "status":
                    msg = (f"<?xml version=\"1.0\"?><Error><Code>{'SlowDown' if rule.code == 503 else 'InternalError'}"
                           f"</Code><Message>injected {rule.code}</Message></Error>").encode()
                    reason = "Service Unavailable" if rule.code == 503 else "Internal Server Error"
                    client.sendall(f"HTTP/1.1 {rule.code} {reason}\r\nContent-Type: application/xml\r\n"
                                   f"Content-Length: {len(msg)}\r\n\r\n".encode() + msg)
                    continue
                if up is None:
                    up = socket.create_connection(self.upstream, timeout=IDLE)
                    ubuf = bytearray()
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    head = _with_length(head, len(body))
                up.sendall(head + body)
                rhead = _read_head(up, ubuf)
                status, rheaders = _parse(rhead)
                code = int(status.split(" ")[1]) if len(status.split(" ")) > 1 else 0
                rbody = _read_body(up, ubuf, rheaders, method == "HEAD" or code in (204, 304) or code < 200)
                if "chunked" in rheaders.get("transfer-encoding", "").lower():
                    rhead = _with_length(rhead, len(rbody))
                if rule is not None and rule.kind == "latency":
                    self._sleep(rule.seconds)
                if rule is not None and rule.kind == "flip" and rbody:
                    at = len(rbody) // 2 if rule.offset is None else min(rule.offset, len(rbody) - 1)
                    rbody = rbody[:at] + bytes([rbody[at] ^ 0xFF]) + rbody[at + 1 :]
                if rule is not None and rule.kind == "truncate" and rbody:
                    client.sendall(rhead + rbody[: len(rbody) // 2])
                    client.shutdown(socket.SHUT_WR)
                    return
                if rule is not None and rule.kind == "short" and rbody:
                    rbody = rbody[: len(rbody) // 2]
                    rhead = _with_length(rhead, len(rbody))
                client.sendall(rhead + rbody)
                if rheaders.get("connection", "").lower() == "close":
                    return
        except (_Closed, OSError):
            return
        finally:
            with self._mu:
                self._conns.discard(client)
            for s in (client, up):
                if s is not None:
                    with contextlib.suppress(OSError):
                        s.close()

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._closed and time.monotonic() < deadline:
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def drop_connections(self) -> None:
        """Reset every client connection open now (a network blip)."""
        with self._mu:
            conns = list(self._conns)
        for c in conns:
            _reset(c)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        self.drop_connections()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
