"""How many records of each source a mixture's step takes, and where they sit.

Pure Python and NumPy: the per-step counts of a :class:`loaderx.mixture.Mixture`
as a function of ``(seed, step)``, and the checks of its weights and of a
saved mixture identity. Nothing here reads data or loads the native library.

Exact counts (the default). With weights ``w_i`` (exact rationals, summing to
1) and a global batch ``G``, source ``i`` needs ``w_i·G`` records per step:
``floor(w_i·G)`` of them every step, plus one *extra* on some steps. The
extras of a step number ``K = G - Σ floor(w_i·G)``, and source ``i`` must get
them at the rate ``u_i = w_i·G - floor(w_i·G)`` with its running lag
``u_i·t - extras_i(t)`` strictly inside (-1, 1) at every step: that is a Pfair
schedule of tasks of weights ``u_i`` on ``K`` processors, fully used
(``Σ u_i = K``). Rounding the running targets alone does not give it (a
source could get two extras in a step, or lose one it had), so the extras
come from the PD² rule: at each step the ``K`` eligible sources whose next
extra has the earliest deadline, ties broken by the successor bit and the
group deadline (Anderson and Srinivasan's PD², optimal for such systems).
Every count is then within ±1 of ``w_i·G`` and every running sum within ±1
of ``w_i·G·(s+1)``.

The schedule is periodic: with ``L`` the least common multiple of the
denominators of the ``u_i``, step ``t`` has the extras of step ``t mod L``
and every lag is 0 at multiples of ``L``. A step is evaluated from the
nearest known step before it (step 0, every multiple of :data:`CHECKPOINT`
passed so far, and the anchors of a saved cursor) and, per thread, from the
last steps evaluated when those are closer: a loader walking forward pays
one PD² step per step. Without a cursor, the first evaluation of a step
``s`` in a process replays ``min(s mod L, L)`` steps (about 6 µs each with
four sources, measured here): nothing for weights of small denominators
(``0.7/0.3``: ``L ≤ 10``), seconds for weights whose common denominator is
in the millions (token counts). A loader's state therefore records, for an
exact schedule, the records of each source before the steps it draws next
(:meth:`Schedule.anchors`); PD²'s next step depends only on those counts,
so a resumed loader continues from them (:meth:`Schedule.seek`, after
checking every lag) instead of replaying. With two sources taking extras
the schedule has a closed form instead (``floor(u_0·t)``), O(1). The
records before each weights segment are found when first needed, or taken
from the anchors too.

Sampled counts (``counts="sampled"``): each step's counts are a multinomial
draw of ``G`` records with probabilities ``w_i``. The running sum a source's
stream position needs comes from a bridge, not a replay: a block of
``2**T`` steps (``2**T·G`` draws under 10**9) draws its total counts as one
multinomial keyed by ``(seed, segment, block)``, and each block splits into
halves by a multivariate hypergeometric draw keyed by the half, down to
single steps. Each step's counts are then an exact Multinomial(G, w) draw,
independent across steps, and the running sum at step ``s`` costs
``s // 2**T`` block draws plus ``T`` splits.

Within a step, the rows of the global batch are spread by source: source
``i``'s ``j``-th row of the step sorts at ``(j + ½) / c_i``, so every
contiguous slice of the batch (a rank's share) holds close to its share of
every source, and a source's rows in any slice are consecutive in ``j``.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

#: the count modes of a mixture
COUNTS = ("exact", "sampled")
#: steps between the checkpoints of an exact schedule's period
CHECKPOINT = 1024
#: an exact schedule whose period is at most this many steps keeps the extras
#: before each step of it, so that any step's counts are a table lookup
TABLE_PERIOD = 4096
#: draws a sampled block may hold (numpy's hypergeometric needs fewer than 10**9)
_BRIDGE_DRAWS = 10**9 - 1


# -- weights -------------------------------------------------------------------


def as_fraction(value: Any, where: str) -> Fraction:
    """An exact, finite, non-negative weight: an int, a Fraction, or a float
    read from its ``str()`` (``0.1`` is ``1/10``, not the binary fraction): a
    NumPy float from the shortest decimal of its own precision, so
    ``np.float32(0.6)`` is ``3/5`` as typed."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{where} is {value!r}; a weight must be a number, not a bool")
    if isinstance(value, Fraction):
        f = value
    elif isinstance(value, (int, np.integer)):
        f = Fraction(int(value))
    elif isinstance(value, (float, np.floating)):
        x = float(value)
        if not math.isfinite(x):
            raise ValueError(f"{where} is {value!r}; weights must be finite and non-negative")
        # the shortest decimal that reads back as this value in its own precision
        text = np.format_float_positional(value, unique=True, trim="0") if isinstance(value, np.floating) else str(x)
        f = Fraction(text)
    else:
        raise TypeError(
            f"{where} is {value!r} ({type(value).__name__}); a weight must be an int, a float or a Fraction"
        )
    if f < 0:
        raise ValueError(f"{where} is {value!r}; weights must be finite and non-negative")
    return f


def check_weights(weights: Any, names: Sequence[str], where: str) -> tuple[Fraction, ...]:
    """One weight per source, normalised to sum 1, from a mapping of source
    name -> weight (names left out weigh 0) or a sequence in source order."""
    if isinstance(weights, Mapping):
        unknown = [k for k in weights if k not in names]
        if unknown:
            raise ValueError(f"{where} names unknown source {unknown[0]!r}; the sources are {list(names)}")
        raw = [as_fraction(weights.get(n, 0), f"{where}[{n!r}]") for n in names]
    elif isinstance(weights, (list, tuple, np.ndarray)):
        if len(weights) != len(names):
            raise ValueError(f"{where} has {len(weights)} weights for {len(names)} sources {list(names)}")
        raw = [as_fraction(w, f"{where}[{n!r}]") for n, w in zip(names, weights)]
    else:
        raise TypeError(
            f"{where} must be a dict of source name -> weight (or a list in source order), got {weights!r}"
        )
    total = sum(raw)
    if total == 0:
        raise ValueError(f"{where} are all 0 ({dict(zip(names, map(str, raw)))}): nothing can be drawn")
    return tuple(w / total for w in raw)


def check_schedule(weights: Any, names: Sequence[str]) -> tuple[tuple[int, tuple[Fraction, ...]], ...]:
    """``((start step, weights), ...)`` from weights, or from a schedule
    ``{0: weights, 10_000: weights, ...}`` (int keys, one of them 0)."""
    if isinstance(weights, Mapping) and weights and all(
        isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in weights
    ):
        starts = sorted(int(k) for k in weights)
        if starts[0] != 0:
            raise ValueError(f"a weights schedule must start at step 0; its first step is {starts[0]}")
        return tuple((s, check_weights(weights[s], names, f"weights at step {s}")) for s in starts)
    return ((0, check_weights(weights, names, "weights")),)


def weights_text(schedule: Sequence[tuple[int, Sequence[Fraction]]], names: Sequence[str]) -> dict[str, dict[str, str]]:
    """The schedule as a state records it: ``{"start": {name: "p/q"}}``."""
    return {str(start): {n: str(w) for n, w in zip(names, ws)} for start, ws in schedule}


# -- exact counts ----------------------------------------------------------------


class _PD2:
    """The Pfair extras of tasks with weights ``u`` (each in (0, 1), summing to
    the integer ``k``): ``state(t)``, the extras each task had in steps
    ``[0, t)`` for ``0 <= t <= period``.

    PD²'s next step depends only on the extras so far (and the step), so
    any step's extras known for certain (``0`` at step 0, a checkpoint met
    on the way, or one taken from a saved cursor by :meth:`seek`) is a
    point the schedule continues from: ``state(t)`` runs PD² from the
    nearest known point at or before ``t`` (or from where this thread's
    last few calls stood, when closer), keeping the extras at every
    multiple of :data:`CHECKPOINT` it passes.
    """

    #: PD² steps run by every schedule of this process (tests count the work of a seek with it)
    work = 0
    #: the positions each thread remembers from its last calls
    _RECENT = 4

    def __init__(self, u: Sequence[Fraction], k: int) -> None:
        self.p = [x.numerator for x in u]
        self.q = [x.denominator for x in u]
        self.k = k
        self.period = math.lcm(*self.q)
        self._marks: dict[int, tuple[int, ...]] = {0: (0,) * len(u)}  # known extras by step
        self._known = [0]  # the steps of _marks, sorted
        self._lock = threading.Lock()
        self._last = threading.local()

    def __getstate__(self) -> dict[str, Any]:
        return {"p": self.p, "q": self.q, "k": self.k, "period": self.period,
                "_marks": self._marks, "_known": self._known}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._last = threading.local()

    def _key(self, i: int, j: int) -> tuple[int, int, int, int]:
        """PD²'s priority of task ``i``'s subtask ``j`` (1-based); smaller first."""
        p, q = self.p[i], self.q[i]
        d = -(-j * q // p)  # deadline: ceil(j / u)
        b = 1 if (j * q) % p else 0  # successor bit: its window overlaps the next one's
        g = 0
        if b and 2 * p >= q:  # a heavy task: the group deadline breaks the tie
            m = -(-d * (q - p) // q)
            g = -(-m * q // (q - p))
        return (d, -b, -g, i)

    def _fresh(self, state: list[int]) -> tuple[list[tuple[int, int, int, int]], list[int]]:
        """Each task's next subtask: its priority and its release step."""
        n = len(state)
        return [self._key(i, state[i] + 1) for i in range(n)], [(state[i] * self.q[i]) // self.p[i] for i in range(n)]

    def _advance(
        self, state: list[int], t0: int, t1: int, nxt: tuple[list[Any], list[int]] | None = None
    ) -> tuple[list[Any], list[int]]:
        """Run the steps ``[t0, t1)`` on ``state`` (extras so far, in place);
        returns the next subtasks' priorities and releases (``nxt``: those of
        ``state``, when known)."""
        p, q, k = self.p, self.q, self.k
        n = len(p)
        keys, release = nxt if nxt is not None else self._fresh(state)
        keys, release = list(keys), list(release)
        for t in range(t0, t1):
            ready = [keys[i] for i in range(n) if release[i] <= t]
            if len(ready) < k:  # cannot happen for Σu = k (PD² is optimal); never silently wrong
                raise AssertionError(f"mixture schedule: {len(ready)} sources ready for {k} extras at step {t}")
            ready.sort()
            for key in ready[:k]:
                i = key[3]
                state[i] += 1
                keys[i] = self._key(i, state[i] + 1)
                release[i] = (state[i] * q[i]) // p[i]
        _PD2.work += t1 - t0
        return keys, release

    def _mark(self, t: int, state: tuple[int, ...]) -> None:
        """Keep the extras at step ``t`` (under the lock)."""
        if t not in self._marks:
            self._marks[t] = state
            bisect.insort(self._known, t)

    def seek(self, t: int, state: tuple[int, ...]) -> None:
        """Take the extras at step ``t`` (``0 <= t < period``) from a saved
        cursor, for the schedule to continue from. The caller has checked
        that every lag is inside (-1, 1).

        Raises:
            ValueError: other extras at ``t`` are known already.
        """
        with self._lock:
            got = self._marks.get(t)
            if got is not None and got != state:
                raise ValueError(
                    f"the mixture schedule has extras {list(got)} at step {t} of its period, the cursor says "
                    f"{list(state)}"
                )
            self._mark(t, state)

    def state(self, t: int) -> tuple[int, ...]:
        with self._lock:
            at = self._known[bisect.bisect_right(self._known, t) - 1]
            base = self._marks[at]
        nxt = None
        recent: list[tuple[int, tuple[int, ...], Any]] = getattr(self._last, "v", [])
        for last in recent:  # a position of this thread between the known point and t is closer
            if at <= last[0] <= t:
                at, base, nxt = last
        s = list(base)
        while at < t:
            stop = min(t, (at // CHECKPOINT + 1) * CHECKPOINT)
            nxt = self._advance(s, at, stop, nxt)
            at = stop
            if at % CHECKPOINT == 0:
                with self._lock:
                    self._mark(at, tuple(s))
        out = tuple(s)
        self._last.v = [(t, out, nxt), *(x for x in recent if x[0] != t)][: self._RECENT]
        return out


class ExactCounts:
    """The exact per-step counts of one segment of weights ``w`` (summing to
    1) for a global batch ``g``."""

    def __init__(self, w: Sequence[Fraction], g: int) -> None:
        targets = [x * g for x in w]
        self.base = [math.floor(x) for x in targets]
        frac = [x - b for x, b in zip(targets, self.base)]
        self.extras = g - sum(self.base)
        self.takers = [i for i, f in enumerate(frac) if f]  # sources that take extras
        self.frac = [frac[i] for i in self.takers]
        self.n = len(w)
        self._pd2 = _PD2(self.frac, self.extras) if len(self.takers) > 2 else None
        self.period = math.lcm(*(f.denominator for f in self.frac)) if self.frac else 1
        self._per_period = [int(f * self.period) for f in self.frac]  # extras of a whole period
        self._first = (self.frac[0].numerator, self.frac[0].denominator) if self.frac else (0, 1)
        #: the extras before the steps of a period of at most TABLE_PERIOD steps found so far
        self._table: dict[int, tuple[int, ...]] = {}

    def _extras(self, t: int) -> list[int]:
        """Extras per taker over steps ``[0, t)``."""
        cycles, rest = divmod(t, self.period)
        full = [x * cycles for x in self._per_period]
        if not full:
            return full
        if self._pd2 is not None:
            part = self._table.get(rest)
            if part is None:
                part = self._pd2.state(rest)
                if self.period <= TABLE_PERIOD:  # a short period: every step of it is kept once found
                    self._table[rest] = part
        else:  # two takers share one extra a step: the first takes it at floor(u·t)
            num, den = self._first
            a = (num * rest) // den
            part = (a, rest - a)
        return [x + y for x, y in zip(full, part)]

    def before(self, t: int) -> list[int]:
        """Records of each source over steps ``[0, t)`` of the segment."""
        out = [b * t for b in self.base]
        for i, x in zip(self.takers, self._extras(t)):
            out[i] += x
        return out

    def seek(self, t: int, counts: Sequence[int]) -> None:
        """Take the records of each source over steps ``[0, t)`` of the
        segment from a saved cursor: checked against what the schedule
        allows (each source its ``floor(w_i·G)`` a step and its extras, every
        lag ``u_i·t - extras_i`` strictly inside (-1, 1)), then the point the
        PD² schedule continues from. Without PD² (two sources or fewer take
        extras) the counts are computed and compared instead.

        Raises:
            ValueError: the counts are not ones this schedule can reach at ``t``.
        """
        extras = [c - b * t for c, b in zip(counts, self.base)]
        for i, x in enumerate(extras):
            if i not in self.takers and x != 0:
                raise ValueError(
                    f"source {i} has {counts[i]} records before step {t} of its segment; with its "
                    f"{self.base[i]} a step it must have {self.base[i] * t}"
                )
        mine = [extras[i] for i in self.takers]
        for i, f, x in zip(self.takers, self.frac, mine):
            if not abs(f * t - x) < 1:
                raise ValueError(
                    f"source {i} has {counts[i]} records before step {t} of its segment, not within 1 of "
                    f"its share ({float((self.base[i] + f) * t):.12g})"
                )
        if self._pd2 is None:
            want = self.before(t)
            if want != list(counts):
                raise ValueError(
                    f"the sources have {want} records before step {t} of their segment, not {list(counts)}"
                )
            return
        cycles, rest = divmod(t, self.period)
        self._pd2.seek(rest, tuple(x - y * cycles for x, y in zip(mine, self._per_period)))


class SampledCounts:
    """Multinomial per-step counts of one segment, with running sums from a
    bridge of blocks (see the module docs)."""

    def __init__(self, w: Sequence[Fraction], g: int, seed: int, segment: int) -> None:
        self.p = np.array([float(x) for x in w], dtype=np.float64)
        self.g = g
        self.n = len(w)
        self.seed = seed
        self.segment = segment
        self.levels = max(0, (_BRIDGE_DRAWS // g).bit_length() - 1)  # a top block: 2**levels steps
        self._cache: dict[tuple[int, int], np.ndarray] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_cache", "_lock")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._cache = {}
        self._lock = threading.Lock()

    def _rng(self, level: int, index: int) -> np.random.Generator:
        key = np.array([self.seed, (self.segment << 40) ^ (level << 56) ^ index], dtype=np.uint64)
        return np.random.Generator(np.random.Philox(key=key))

    def _block(self, level: int, index: int) -> np.ndarray:
        """The counts of the block of ``2**level`` steps at ``index``."""
        got = self._cache.get((level, index))
        if got is not None:
            return got
        if level == self.levels:
            c = self._rng(level, index).multinomial(self.g << level, self.p).astype(np.int64)
        else:
            parent = self._block(level + 1, index >> 1)
            left = self._rng(level, index & ~1).multivariate_hypergeometric(parent, self.g << level, method="marginals")
            c = left.astype(np.int64) if index & 1 == 0 else parent - left
        with self._lock:
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[(level, index)] = c
        return c

    def before(self, t: int) -> list[int]:
        top, rest = divmod(t, 1 << self.levels)
        total = np.zeros(self.n, dtype=np.int64)
        for b in range(top):
            total += self._block(self.levels, b)
        index = top
        for level in range(self.levels - 1, -1, -1):
            index <<= 1
            if rest >> level & 1:
                total += self._block(level, index)
                index += 1
        return [int(x) for x in total]


class Schedule:
    """The counts of every step of a mixture: its weights segments, each an
    :class:`ExactCounts` or :class:`SampledCounts`, laid end to end.

    The records of each source before a segment are found when first needed
    (the segment before's running sums at its end), or taken from a saved
    cursor (:meth:`seek`); so are the extras of an exact schedule at any
    step (:meth:`anchors` says which a cursor records).
    """

    def __init__(
        self, segments: Sequence[tuple[int, Sequence[Fraction]]], g: int, counts: str, seed: int
    ) -> None:
        self.starts = [s for s, _ in segments]
        self.n = len(segments[0][1])
        self.g = g
        #: whether the counts are exact (a cursor then records the schedule's position)
        self.exact = counts == "exact"
        if self.exact:
            self.parts: list[Any] = [ExactCounts(w, g) for _, w in segments]
        else:
            self.parts = [SampledCounts(w, g, seed, k) for k, (_, w) in enumerate(segments)]
        self.weights = [tuple(w) for _, w in segments]
        # records of each source before segment k, for the segments known so far
        self._offsets: dict[int, list[int]] = {0: [0] * self.n}
        self._last = threading.local()  # this thread's last window

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_last"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._last = threading.local()

    def segment(self, step: int) -> int:
        """The weights segment that ``step`` belongs to."""
        return bisect.bisect_right(self.starts, step) - 1

    def _offset(self, k: int) -> list[int]:
        """Records of each source before segment ``k``."""
        got = self._offsets.get(k)
        if got is not None:
            return got
        j = max(i for i in list(self._offsets) if i < k)  # a copy: other threads may add to it
        off = self._offsets[j]
        for m in range(j + 1, k + 1):
            part = self.parts[m - 1].before(self.starts[m] - self.starts[m - 1])
            off = [a + b for a, b in zip(off, part)]
            self._offsets.setdefault(m, off)
        return off

    def before(self, step: int) -> list[int]:
        """Records of each source before ``step``."""
        k = self.segment(step)
        return [a + b for a, b in zip(self._offset(k), self.parts[k].before(step - self.starts[k]))]

    def window(self, step: int) -> tuple[list[int], list[int]]:
        """``(records of each source before step, records of each in step)``."""
        last = self._last.__dict__.get("w")
        if last is not None and last[0] == step:
            return last[1]
        k = self.segment(step)
        part, t = self.parts[k], step - self.starts[k]
        a, b = part.before(t), part.before(t + 1)
        off = self._offset(k)
        got = [x + y for x, y in zip(off, a)], [y - x for x, y in zip(a, b)]
        self._last.w = (step, got)  # the streams of one step ask again
        return got

    def anchors(self, steps: Sequence[int]) -> list[list[Any]]:
        """What a cursor records of an exact schedule for a loader that
        draws ``steps`` next: ``[step, [records of each source before it]]``
        for each of them and for the start of each one's weights segment
        (after the first), in step order."""
        points = set(steps)
        points |= {self.starts[k] for k in map(self.segment, steps) if k > 0}
        return [[u, self.before(u)] for u in sorted(points)]

    def seek(self, anchors: Sequence[Sequence[Any]]) -> None:
        """Take the schedule's position from a saved cursor's anchors (as
        :meth:`anchors` makes them, checked for shape): each must be counts
        this schedule can reach at its step, and agree with what is known.

        Raises:
            ValueError: an anchor does not fit the schedule (the message says how).
        """
        if not self.exact:
            raise ValueError("a cursor's mixture anchors are for exact counts; this mixture's are sampled")
        for u, counts in sorted(anchors, key=lambda a: a[0]):
            counts = list(counts)
            if len(counts) != self.n or sum(counts) != self.g * u:
                raise ValueError(
                    f"its mixture anchor at step {u} has {counts}: {self.n} counts summing to "
                    f"{self.g} x {u} = {self.g * u} are needed"
                )
            k = self.segment(u)
            if u == self.starts[k]:
                if k > 0:
                    self._seek_offset(k, counts)
                elif any(counts):
                    raise ValueError(f"its mixture anchor at step 0 has {counts}: no records come before step 0")
                continue
            local = [c - o for c, o in zip(counts, self._offset(k))]
            if min(local) < 0:
                raise ValueError(
                    f"its mixture anchor at step {u} has {counts}, fewer than the {self._offset(k)} records "
                    f"before the weights change at step {self.starts[k]}"
                )
            try:
                self.parts[k].seek(u - self.starts[k], local)
            except ValueError as e:
                raise ValueError(f"its mixture anchor at step {u} does not fit the schedule: {e}") from None

    def _seek_offset(self, k: int, counts: list[int]) -> None:
        """Take the records of each source before segment ``k`` from a
        cursor: within 1 of its share of every segment before, and equal to
        what is known."""
        got = self._offsets.get(k)
        if got is not None:
            if got != counts:
                raise ValueError(
                    f"its mixture anchor at step {self.starts[k]} has {counts}, but the sources have {got} "
                    "records there"
                )
            return
        for i, c in enumerate(counts):
            target = sum(
                (self.weights[j][i] * self.g * (self.starts[j + 1] - self.starts[j]) for j in range(k)), Fraction(0)
            )
            if not abs(c - target) < k:
                raise ValueError(
                    f"its mixture anchor at step {self.starts[k]} gives source {i} {c} records, more than "
                    f"{k} from its share {float(target):.6g}"
                )
        self._offsets[k] = counts


_SPREADS: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}


def spread(counts: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`spread_of`, remembered: exact counts take a few distinct values."""
    key = tuple(counts)
    got = _SPREADS.get(key)
    if got is None:
        if len(_SPREADS) > 1024:
            _SPREADS.clear()
        got = _SPREADS[key] = spread_of(key)
    return got


def spread_of(counts: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(source, j)`` of each position of a global batch holding
    ``counts[i]`` rows of source ``i``: row ``j`` of source ``i`` sorts at
    ``(j + 1/2) / counts[i]`` (ties by source), so the sources interleave
    evenly and each one's rows come in order of ``j``."""
    src = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    j = np.concatenate([np.arange(c, dtype=np.int64) for c in counts]) if len(counts) else src
    c = np.asarray(counts, dtype=np.float64)[src]
    order = np.argsort((2 * j + 1) / (2 * c), kind="stable")
    src, j = src[order], j[order]
    src.flags.writeable = j.flags.writeable = False  # shared between calls
    return src, j


# -- saved identities ----------------------------------------------------------------


def compare_mixture(saved: Any, mine: Mapping[str, Any]) -> None:
    """Raise a ValueError saying how a saved ``mixture`` entry differs from this loader's."""
    if not isinstance(saved, Mapping):
        raise ValueError(f"state_dict has mixture={saved!r}, not a dict")
    if "by" not in saved:  # saved before weights could count tokens
        saved = {**saved, "by": "records"}
    s_src, m_src = saved.get("sources"), mine["sources"]
    # the order counts: it numbers the sources and lays out the global index space
    if not isinstance(s_src, Mapping) or list(s_src.items()) != list(m_src.items()):
        if not isinstance(s_src, Mapping) or list(s_src) != list(m_src):
            raise ValueError(
                f"state_dict is from another mixture: its sources are "
                f"{list(s_src) if isinstance(s_src, Mapping) else s_src}, this loader's are {list(m_src)}"
            )
        for name in m_src:
            if s_src[name] != m_src[name]:
                raise ValueError(
                    f"state_dict is from another mixture: source {name!r} had {s_src[name]!r} records, "
                    f"this loader's has {m_src[name]}"
                )
    if saved.get("weights") != mine["weights"]:
        raise ValueError(
            f"state_dict is from another mixture: its weights schedule is {saved.get('weights')!r}, "
            f"this loader's is {mine['weights']!r}"
        )
    for key in mine:  # "data", the sources' fingerprints, is loader._state's to compare
        if key == "data":
            continue
        if saved.get(key) != mine[key]:
            raise ValueError(f"state_dict has mixture {key}={saved.get(key)!r} but this loader has {mine[key]!r}")
    extra = [k for k in saved if k not in mine and k != "data"]
    if extra:
        raise ValueError(f"state_dict's mixture has unexpected keys {extra}")
