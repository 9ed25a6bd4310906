"""DataLoader(workers="auto"), the default: the verdict on measured step
figures, what forces a mode, when the loader stays on threads (and warns),
and that a move to worker processes changes no batch, at any step, across
state_dict() / load_state_dict() made before, during and after it.

No test depends on the machine's speed: the step figures are injected
(``StepTimer.inject``), so is the clock that times the consumer's steps
before and after a move (the trial), and the loaders that move wait for
their processes (``wait_for_workers``) so the move lands within the steps a
test takes.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import procw_funcs as funcs
import pytest

from loaderx.converter import from_numpy
from loaderx.dataloader import DataLoader, LoaderOptions
from loaderx.dataset import DenseDataset
from loaderx.errors import WorkersWarning
from loaderx.loader import _autoworkers as aw

N = 203
#: a step whose transform holds the GIL: 30 ms of transform, 20 of them blocked
GIL_BOUND = aw.StepTimes(gather_s=0.002, transform_s=0.030, blocked_s=0.020)
#: a transform of NumPy calls on large arrays: never blocked, no faults
GIL_FREE = aw.StepTimes(gather_s=0.002, transform_s=0.030, blocked_s=0.0005)
#: the steps a loader makes before it can have judged
JUDGED = aw.WARMUP_STEPS + aw.WINDOW_STEPS




@pytest.fixture
def stores(tmp_path: Path) -> Path:
    rng = np.random.default_rng(5)
    from_numpy(tmp_path / "data", rng.integers(0, 255, size=(N, 3, 5), dtype=np.uint8), codec="zstd")
    from_numpy(tmp_path / "label", np.arange(N, dtype=np.int64))
    return tmp_path


@pytest.fixture(autouse=True)
def no_forced_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(aw.ENV_VAR, raising=False)


def streams_of(d: Path) -> dict[str, DenseDataset]:
    return {"data": DenseDataset(d / "data"), "label": DenseDataset(d / "label")}


def auto_loader(streams: Any, figures: aw.StepTimes | None, *, thread_pace: float = 0.1,
                process_pace: float = 0.05, **kw: Any) -> DataLoader:
    """A workers="auto" loader whose measured steps report ``figures`` and
    whose consumer receives a step every ``thread_pace`` seconds on threads
    and every ``process_pace`` on processes."""
    loader = DataLoader(streams, **{"batch_size": funcs.BATCH, "num_workers": 2, **kw})
    loader.wait_for_workers = True
    if figures is not None:
        assert loader._timer is not None, loader.stats()
        loader._timer.inject = lambda step: figures
    now = [0.0]

    def clock() -> float:
        now[0] += thread_pace if loader._mode == "thread" else process_pace
        return now[0]

    loader._clock = clock
    return loader


def copy_tree(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: copy_tree(v) for k, v in x.items()}
    if isinstance(x, np.ndarray):
        return x.copy()
    return x


def assert_same(got: Any, want: Any, where: str) -> None:
    """Equal values, dtypes, shapes and bytes."""
    assert type(got) is type(want), where
    if isinstance(want, dict):
        assert list(got) == list(want), where
        for k in want:
            assert_same(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, np.ndarray):
        assert (got.dtype, got.shape) == (want.dtype, want.shape), where
        assert got.tobytes() == want.tobytes(), where
    else:
        assert got == want, where


# -- the verdict ----------------------------------------------------------------


def test_a_gil_bound_transform_moves_to_processes():
    v = aw.decide([GIL_BOUND] * aw.WINDOW_STEPS, workers=2, remaining=None, batch_bytes=1 << 20)
    assert v.processes, v.reason
    assert "GIL" in v.reason
    assert (v.steps, v.gather_s, v.transform_s, v.blocked_s) == (aw.WINDOW_STEPS, 0.002, 0.030, 0.020)
    assert "30.0 ms" in v.figures() and "67% of it blocked" in v.figures()


def test_a_faulting_transform_moves_to_processes():
    faults = aw.StepTimes(gather_s=0.01, transform_s=0.09, blocked_s=0.0, kernel_s=0.04)
    v = aw.decide([faults] * aw.WINDOW_STEPS, workers=2, remaining=None, batch_bytes=64 << 20)
    assert v.processes, v.reason
    assert "fresh pages" in v.reason


@pytest.mark.parametrize(
    ("times", "workers", "remaining", "nbytes", "why"),
    [
        (GIL_BOUND, 1, None, 0, "1 worker"),
        (aw.StepTimes(0.05, 0.03, 0.02), 2, None, 0, "the gather is the bottleneck"),
        (GIL_FREE, 2, None, 0, "runs side by side on threads"),
        (aw.StepTimes(0.0001, 0.001, 0.0007), 2, None, 0, "under 2 ms"),
        (GIL_BOUND, 2, None, 256 << 20, "copying the 256.0 MiB batch"),
        # 20 ms saved a step over 2 workers: 150 steps win back 1.5 s, 100 do not
        (GIL_BOUND, 2, 100, 0, "the 100 steps left would win back 1.00 s"),
    ],
)
def test_what_keeps_the_loader_on_threads(times, workers, remaining, nbytes, why):
    v = aw.decide([times] * aw.WINDOW_STEPS, workers, remaining, nbytes)
    assert not v.processes
    assert why in v.reason, v.reason


def test_a_long_enough_finite_run_moves():
    assert aw.decide([GIL_BOUND] * aw.WINDOW_STEPS, 2, 151, 0).processes


def test_processes_are_kept_only_when_faster():
    assert aw.pace([1.0, 1.5, 2.0, 2.5]) == 0.5
    assert aw.pace([1.0, 2.0]) is None
    assert aw.keep_processes(0.1, 0.08)
    assert not aw.keep_processes(0.1, 0.09)  # near par threads win
    assert not aw.keep_processes(0.1, 0.2)
    assert aw.keep_processes(None, 0.2)  # nothing to compare with


def test_the_timer_leaves_out_the_warmup_and_stops_when_full():
    timer = aw.StepTimer()
    timer.inject = lambda step: aw.StepTimes(0.0, float(step), 0.0)
    for step in range(JUDGED + 3):
        assert timer.active == (step < JUDGED)
        timer.gathered(step, 0.001)
        timer.transformed(step, timer.transform_start())
    assert timer.full and not timer.active
    assert [t.transform_s for t in timer.window()] == [float(s) for s in range(aw.WARMUP_STEPS, JUDGED)]


def test_the_timer_measures_a_thread_that_waits_as_blocked():
    """A transform that sleeps is off the CPU without being preempted: all
    of it counts as blocked (the GIL's wait looks the same)."""
    import time

    timer = aw.StepTimer()
    start = timer.transform_start()
    time.sleep(0.05)
    timer.transformed(0, start)
    (got,) = timer._times
    assert got.transform_s >= 0.04 and got.blocked_s >= 0.8 * got.transform_s


# -- choosing and forcing a mode ------------------------------------------------------


def test_the_default_is_auto():
    assert LoaderOptions().workers == "auto"
    assert DataLoader.__init__.__kwdefaults__["workers"] == "auto"


def test_auto_without_a_transform_or_with_one_worker_never_times(stores):
    with auto_loader(streams_of(stores), GIL_FREE, transform=funcs.flip_scale) as timed:
        assert not timed.stats()["workers_settled"]  # timing the first steps
    with DataLoader(streams_of(stores), batch_size=8) as loader:
        assert loader.stats()["workers_settled"]
        assert loader._timer is None
        assert "without a transform" in loader.stats()["workers_reason"]
    with DataLoader(streams_of(stores), batch_size=8, num_workers=1, transform=funcs.flip_scale) as loader:
        assert loader._timer is None
        assert "1 worker" in loader.stats()["workers_reason"]


@pytest.mark.parametrize("forced", ["thread", "process"])
def test_the_environment_forces_the_mode_of_auto_loaders(stores, monkeypatch, deadline, forced):
    monkeypatch.setenv(aw.ENV_VAR, forced)
    with DataLoader(streams_of(stores), batch_size=8, num_workers=2, transform=funcs.flip_scale) as loader:
        next(loader)
        s = loader.stats()
        assert (s["workers"], s["workers_chosen"]) == ("auto", forced)
        assert s["workers_reason"] == f"forced by LOADERX_WORKERS={forced}"
        assert loader._timer is None
    # an explicit argument wins over the environment
    other = "process" if forced == "thread" else "thread"
    with DataLoader(streams_of(stores), batch_size=8, num_workers=2, workers=other) as loader:
        assert loader.stats()["workers_chosen"] == other


def test_a_bad_environment_value_is_quoted(stores, monkeypatch):
    monkeypatch.setenv(aw.ENV_VAR, "threads")
    with pytest.raises(ValueError, match=r"LOADERX_WORKERS='threads': it must be 'auto', 'thread' or 'process'"):
        DataLoader(streams_of(stores), batch_size=8)


def test_explicit_threads_never_move(stores):
    with DataLoader(streams_of(stores), batch_size=8, num_workers=2, transform=funcs.flip_scale,
                    workers="thread") as loader:
        assert loader._timer is None
        for _ in range(JUDGED + 5):
            next(loader)
        assert loader.stats()["workers_chosen"] == "thread"


# -- staying on threads ---------------------------------------------------------------


def test_a_gil_free_transform_stays_on_threads_without_a_warning(stores, recwarn):
    with auto_loader(streams_of(stores), GIL_FREE, transform=funcs.flip_scale) as loader:
        for _ in range(JUDGED + 3):
            next(loader)
        s = loader.stats()
    assert s["workers_chosen"] == "thread" and s["workers_switch_step"] is None
    assert "runs side by side on threads" in s["workers_reason"]
    assert s["measured"]["blocked_s"] == GIL_FREE.blocked_s
    assert not [w for w in recwarn if issubclass(w.category, WorkersWarning)]


def test_an_unpicklable_transform_stays_and_warns_once(stores):
    with auto_loader(streams_of(stores), GIL_BOUND, transform=lambda b: {"x": b["data"] * 2}) as loader:
        with pytest.warns(WorkersWarning) as caught:
            for _ in range(JUDGED + 10):
                next(loader)
        s = loader.stats()
    assert len(caught) == 1
    assert caught[0].filename == __file__  # it points at the caller of next()
    text = str(caught[0].message)
    assert "blocked" in text and "30.0 ms" in text  # the figures it measured
    assert "needs transform to be picklable" in text and "<lambda>" in text
    assert s["workers_chosen"] == "thread"


def test_an_in_memory_array_stays_and_warns(stores):
    streams = {"data": np.arange(N * 4).reshape(N, 4), "label": DenseDataset(stores / "label")}
    with auto_loader(streams, GIL_BOUND, transform=funcs.flip_scale) as loader:
        with pytest.warns(WorkersWarning, match=r"stream 'data' is an in-memory NumPy array"):
            for _ in range(JUDGED + 1):
                next(loader)
        assert loader.stats()["workers_chosen"] == "thread"


def test_a_batch_a_process_cannot_hand_back_stays_and_warns(stores):
    with auto_loader(streams_of(stores), GIL_BOUND, transform=funcs.returns_a_set) as loader:
        with pytest.warns(WorkersWarning, match=r"returned builtins.set"):
            for _ in range(JUDGED + 1):
                next(loader)
        assert loader.stats()["workers_chosen"] == "thread"


def test_a_short_finite_run_stays(stores, recwarn):
    with auto_loader(streams_of(stores), GIL_BOUND, transform=funcs.flip_scale, steps=40) as loader:
        assert len(list(loader)) == 40
        s = loader.stats()
    assert s["workers_chosen"] == "thread"
    assert "steps left would win back" in s["workers_reason"]
    assert not [w for w in recwarn if issubclass(w.category, WorkersWarning)]


# -- moving: the same batches, at every step ---------------------------------------------


def reference(d: Path, steps: int, **kw: Any) -> list[Any]:
    with DataLoader(streams_of(d), batch_size=funcs.BATCH, num_workers=2, workers="thread",
                    transform=funcs.flip_scale, **kw) as loader:
        return [copy_tree(next(loader)) for _ in range(steps)]


def test_a_move_to_processes_changes_no_batch(stores, deadline, caplog):
    steps = 40
    want = reference(stores, steps, seed=3)
    got, states, modes = [], [], []
    with caplog.at_level(logging.INFO, logger="loaderx"):
        loader = auto_loader(streams_of(stores), GIL_BOUND, transform=funcs.flip_scale, seed=3)
        with loader:
            for _ in range(steps):
                states.append(loader.state_dict())
                got.append(copy_tree(next(loader)))
                modes.append(loader.stats()["workers_chosen"])
            s = loader.stats()
            pids = loader._procs.pids()
            assert "workers='auto' (now 'process')" in repr(loader)
    for step in range(steps):
        assert_same(got[step], want[step], f"step {step}")
    switch = s["workers_switch_step"]
    assert s["workers_chosen"] == "process" and switch is not None and JUDGED < switch < steps
    assert s["workers_settled"]  # judged, moved and checked within the 40 steps
    assert modes[switch - 1] == "thread" and modes[switch] == "process"
    assert [st["step"] for st in states] == list(range(steps))  # no step lost or repeated
    assert len(pids) == 2
    moves = [r for r in caplog.records if "moving to 2 worker processes" in r.getMessage()]
    assert len(moves) == 1 and moves[0].levelno == logging.INFO
    assert "blocked" in moves[0].getMessage()

    # a fresh loader resumed from a state saved before, at and after the move
    for at in (switch - 1, switch, switch + 1):
        with auto_loader(streams_of(stores), GIL_BOUND, transform=funcs.flip_scale, seed=3) as resumed:
            resumed.load_state_dict(states[at])
            for step in range(at, steps):
                assert_same(next(resumed), want[step], f"resumed at {at}, step {step}")


def test_processes_slower_than_threads_hand_back_to_threads(stores, deadline, caplog):
    steps = 50
    want = reference(stores, steps, seed=4)
    got = []
    with caplog.at_level(logging.INFO, logger="loaderx"):
        loader = auto_loader(streams_of(stores), GIL_BOUND, transform=funcs.flip_scale, seed=4,
                             thread_pace=0.05, process_pace=0.08)
        with loader:
            modes = []
            for _ in range(steps):
                got.append(copy_tree(next(loader)))
                modes.append(loader.stats()["workers_chosen"])
            s = loader.stats()
            assert loader._procs is None  # the processes are gone
    for step in range(steps):
        assert_same(got[step], want[step], f"step {step}")
    assert "process" in modes and modes[-1] == "thread"
    back = modes.index("thread", modes.index("process"))
    assert modes[back:] == ["thread"] * (steps - back)  # for good
    assert s["workers_chosen"] == "thread" and s["workers_switch_step"] is None
    assert "moved back to threads" in s["workers_reason"]
    assert "every 80.0 ms, on threads every 50.0 ms" in s["workers_reason"]
    assert len([r for r in caplog.records if "moved back to threads" in r.getMessage()]) == 1


def test_seeking_during_and_after_the_move(stores, deadline):
    steps = 40
    want = reference(stores, steps, seed=9)
    # a prefetch window the threads fill while the processes start: steps
    # claimed by threads are still to be handed out when the processes are ready
    loader = auto_loader(streams_of(stores), GIL_BOUND, transform=funcs.flip_scale, seed=9, prefetch=6)
    with loader:
        step = 0
        while loader._handoff is None:
            assert step < JUDGED + 1, "the loader did not start its processes once it judged"
            assert_same(next(loader), want[step], f"step {step}")
            step += 1
        assert loader._handoff > step  # threads still owe steps: the hand-over is under way
        assert loader.stats()["workers_chosen"] == "thread"
        state = loader.state_dict()
        assert state["step"] == step
        assert_same(next(loader), want[step], f"step {step} during the hand-over")
        # seek back while the hand-over is under way: processes make everything from here
        loader.load_state_dict({**state, "step": 4})
        for k in range(4, 20):
            assert_same(next(loader), want[k], f"after seeking back, step {k}")
        assert loader.stats()["workers_chosen"] == "process"
        # and seek once more on processes
        loader.load_state_dict({**state, "step": 30})
        for k in range(30, steps):
            assert_same(next(loader), want[k], f"after seeking forward, step {k}")


def test_a_worker_that_cannot_set_up_keeps_the_loader_on_threads(stores, deadline):
    """The recipe pickles here but not in a fresh interpreter: the loader
    warns and goes on with threads, losing no step."""
    want = reference(stores, JUDGED + 10)
    with auto_loader(streams_of(stores), GIL_BOUND, transform=funcs.flip_scale) as loader:
        loader._process_pool = _breaking_pool(loader._process_pool)
        with pytest.warns(WorkersWarning, match=r"a worker process failed to set up"):
            for step in range(JUDGED + 10):
                assert_same(next(loader), want[step], f"step {step}")
        assert loader.stats()["workers_chosen"] == "thread"


def _breaking_pool(make: Any) -> Any:
    def make_broken() -> Any:
        pool = make()
        pool._recipe = b"not a pickle"
        return pool

    return make_broken


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm (Linux)")
def test_closing_during_the_start_leaves_no_process(stores, deadline):
    loader = auto_loader(streams_of(stores), GIL_BOUND, transform=funcs.flip_scale)
    loader.wait_for_workers = False  # the processes start while threads go on
    for _ in range(JUDGED):
        next(loader)
    pending = loader._pending
    assert pending is not None
    pids = pending.pids()
    loader.close()
    assert pending.closed and pending.pids() == []
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def test_torch_iterable_loaders_stay_on_threads(stores, monkeypatch):
    """Inside torch's worker processes a loader must not start processes of
    its own, whatever the environment forces."""
    pytest.importorskip("torch")
    import multiprocessing

    from loaderx.torch import LoaderIterable

    monkeypatch.setenv(aw.ENV_VAR, "process")
    it = LoaderIterable({"data": str(stores / "data"), "label": str(stores / "label")}, batch_size=8,
                        steps=4, num_workers=2, transform=funcs.flip_scale)
    batches = list(it)
    assert len(batches) == 4
    assert multiprocessing.active_children() == []
