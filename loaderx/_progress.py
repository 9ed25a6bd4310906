"""A small progress line for long conversions (no third-party dependency).

It writes to stderr, redraws at most a few times per second and only when
enabled; by default it is enabled when stderr is a terminal.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

_MIB = float(1 << 20)


def _fmt_duration(seconds: float) -> str:
    seconds = round(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """One self-overwriting status line: records, MiB, MiB/s and ETA.

    Args:
        label: what is being written, shown first on the line.
        total_records: the number of records expected, or None if unknown
            (then no ETA is shown).
        total_bytes: the number of bytes expected, or None if unknown.
        enabled: True or False to force; None to draw only when the stream is
            a terminal.
        stream: where to draw; stderr by default.
        min_interval: seconds between redraws.
    """

    def __init__(
        self,
        label: str,
        total_records: int | None = None,
        total_bytes: int | None = None,
        *,
        enabled: bool | None = None,
        stream: TextIO | None = None,
        min_interval: float = 0.2,
    ) -> None:
        self.stream = sys.stderr if stream is None else stream
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            try:
                enabled = bool(isatty()) if isatty is not None else False
            except (ValueError, OSError):  # closed or detached stream
                enabled = False
        self.enabled = bool(enabled)
        self.label = label
        self.total_records = total_records
        self.total_bytes = total_bytes
        self.records = 0
        self.nbytes = 0
        self.min_interval = min_interval
        self._start = time.perf_counter()
        self._last_draw = 0.0
        self._width = 0
        self._closed = False

    def __repr__(self) -> str:
        return (
            f"Progress({self.label!r}, records={self.records}, bytes={self.nbytes}, "
            f"enabled={self.enabled})"
        )

    def update(self, records: int, nbytes: int) -> None:
        """Count ``records`` more records of ``nbytes`` bytes and maybe redraw."""
        self.records += records
        self.nbytes += nbytes
        if self.enabled:
            now = time.perf_counter()
            if now - self._last_draw >= self.min_interval:
                self._draw(now)

    def line(self, now: float | None = None) -> str:
        """The status line as it would be drawn now."""
        now = time.perf_counter() if now is None else now
        elapsed = max(now - self._start, 1e-9)
        mib = self.nbytes / _MIB
        rate = mib / elapsed
        if self.total_records is not None:
            recs = f"{self.records:,}/{self.total_records:,} records"
        else:
            recs = f"{self.records:,} records"
        total = "" if self.total_bytes is None else f"/{self.total_bytes / _MIB:,.1f}"
        size = f"{mib:,.1f}{total} MiB"
        parts = [f"{self.label}: {recs}", size, f"{rate:,.1f} MiB/s"]
        if self.total_records:
            frac = self.records / self.total_records
            if frac >= 1.0:
                parts.append(f"done in {_fmt_duration(elapsed)}")
            elif frac > 0.0:
                parts.append(f"ETA {_fmt_duration(elapsed * (1.0 - frac) / frac)}")
            else:
                parts.append("ETA ?")
        else:
            parts.append(f"elapsed {_fmt_duration(elapsed)}")
        return " | ".join(parts)

    def _draw(self, now: float) -> None:
        text = self.line(now)
        pad = max(self._width - len(text), 0)
        self._width = len(text)
        try:
            self.stream.write("\r" + text + " " * pad)
            self.stream.flush()
        except (ValueError, OSError):
            self.enabled = False
        self._last_draw = now

    def close(self) -> None:
        """Draw the final state and end the line. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self.enabled:
            self._draw(time.perf_counter())
            try:
                self.stream.write("\n")
                self.stream.flush()
            except (ValueError, OSError):
                pass
