"""hybrid.signals in one process (library use: no install(), so a second signal raises rather than exits)."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from hybrid.signals import children_ignore_stops, deferred_interrupts, first_stop_sets, stoppable


@pytest.fixture(autouse=True)
def interactive_sigint(monkeypatch):  # noqa: ANN001, ANN201
    """SIGINT as Python sets it in a terminal. Started in the background (`nohup`, `cmd &`) the process has it
    ignored, and hybrid leaves an ignored SIGINT ignored (tests/cli/test_signals.py): these tests are about Ctrl-C.
    Signals a few milliseconds apart count as two here (REPEAT_S 0; its own test below)."""
    import hybrid.signals as hs

    monkeypatch.setattr(hs, "REPEAT_S", 0.0)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_the_same_signal_twice_at_once_is_one_stop(monkeypatch) -> None:
    """GNU `timeout` sends its SIGTERM to the process and then to its process group: two deliveries of one stop,
    of which the second (under install(): "stop at once") lost the best plan (`timeout -s TERM 5 hybrid optimize
    ... --workers 2`: exit 143, nothing written, in 2 of 5 runs). A repeat within REPEAT_S is the same stop; a
    repeat after it, or another signal, is a second stop."""
    import hybrid.signals as hs

    monkeypatch.setattr(hs, "REPEAT_S", 0.5)
    monkeypatch.setattr(hs, "_hard", True)
    monkeypatch.setattr(hs, "_starting", False)
    monkeypatch.setattr(hs, "_received", [])
    monkeypatch.setattr(hs, "_last_at", [float("-inf")])
    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(hs, "exit_now", lambda signum, *a: calls.append(("exit", signum)))
    monkeypatch.setattr(hs, "_dispatch", lambda signum: calls.append(("stop", signum)))
    clock = [100.0]
    monkeypatch.setattr(hs.time, "monotonic", lambda: clock[0])
    hs._on_signal(signal.SIGTERM, None)
    clock[0] += 0.001
    hs._on_signal(signal.SIGTERM, None)
    assert calls == [("stop", signal.SIGTERM)]
    clock[0] += 1.0
    hs._on_signal(signal.SIGTERM, None)
    assert calls[1] == ("exit", signal.SIGTERM)
    calls.clear()
    hs._received[:] = [signal.SIGTERM]
    hs._last_at[0] = clock[0]
    hs._on_signal(signal.SIGINT, None)      # another signal at once: a second stop
    assert calls[0] == ("exit", signal.SIGINT)


def _ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.05)  # the handler runs at the next bytecode of the main thread


def test_the_first_signal_calls_back_and_a_second_interrupts() -> None:
    seen: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        with first_stop_sets(seen.append) as hits:
            _ctrl_c()
            assert seen == [signal.SIGINT] and hits == [signal.SIGINT]
            _ctrl_c()
    with deferred_interrupts() as hits:  # a fresh context: the first one is noted again
        _ctrl_c()
    assert hits == [signal.SIGINT]


def test_a_signal_while_children_start_is_acted_on_once_they_have() -> None:
    seen: list[int] = []
    with first_stop_sets(seen.append):
        with children_ignore_stops():
            _ctrl_c()
            assert seen == []  # held while a child would be starting
        assert seen == [signal.SIGINT]


def test_stoppable_stops_a_call_that_holds_its_thread() -> None:
    done = threading.Event()

    def work() -> str:  # stands for a native solve: no Python signal handler can run in it
        done.wait(timeout=60)
        return "best so far" if done.is_set() else "ran out"

    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        assert stoppable(work, done.set) == "best so far"
    finally:
        timer.cancel()
    with pytest.raises(ValueError, match="raised inside"):
        stoppable(lambda: (_ for _ in ()).throw(ValueError("raised inside")), lambda: None)


def test_a_signal_inside_a_ctypes_callback_is_acted_on_after_the_block() -> None:
    """Native code calling back into Python (llvmlite's object cache while Numba loads kernels): a KeyboardInterrupt
    raised in the callback is printed and dropped by ctypes, so the signal would be lost; inside
    `interrupts_after` it is noted there and raised once the block ends."""
    import ctypes

    from hybrid.signals import interrupts_after

    calls: list[int] = []

    @ctypes.CFUNCTYPE(None)
    def callback() -> None:   # what llvmlite's _raw_object_cache_notify is to Numba
        calls.append(1)
        _ctrl_c()

    with pytest.raises(KeyboardInterrupt):
        with interrupts_after():
            callback()   # ctypes calls it from C, as a native library would
            assert calls == [1]   # the block went on: nothing was raised in the callback
    with interrupts_after():   # no signal: nothing raised
        calls.append(2)
    assert calls == [1, 2]


def test_an_exception_a_stop_turned_into_is_reported_as_the_interrupt() -> None:
    """A KeyboardInterrupt that native code changed on its way (cp_model's module initialisation raises
    "ImportError: initialization failed") ends the command as interrupted (143 after SIGTERM), saying what broke;
    the same exception without a signal is a bug and propagates."""
    import click

    from hybrid.cli.main import _Group

    @click.group(cls=_Group)
    def group() -> None:
        pass

    @group.command()
    @click.option("--signal/--no-signal", "send", default=True)
    def native(send: bool) -> None:
        try:
            if send:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)
        except KeyboardInterrupt:
            pass
        raise ImportError("initialization failed")

    with pytest.raises(SystemExit) as stop:
        group.main(["native"], prog_name="hybrid")
    assert stop.value.code == 128 + signal.SIGTERM
    with pytest.raises(ImportError):
        group.main(["native", "--no-signal"], prog_name="hybrid")


_FORKSERVER_PROBE = """
import os, signal, sys
import multiprocessing as mp, multiprocessing.util as util
from concurrent.futures import ProcessPoolExecutor
from hybrid import signals

def stops_held(pid):   # SIGINT and SIGTERM blocked or ignored in process pid (Linux /proc)
    f = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    held = int(f["SigBlk"], 16) | int(f["SigIgn"], 16)
    return all(held >> (s - 1) & 1 for s in (signal.SIGINT, signal.SIGTERM))

if __name__ == "__main__":
    signals.install()
    real, spawned = util.spawnv_passfds, []
    def spawn(*args):   # SIGTERM to this process while it starts its n-th helper
        if len(spawned) == int(sys.argv[1]):
            os.kill(os.getpid(), signal.SIGTERM)
        spawned.append(args[1][-1][:40])
        return real(*args)
    util.spawnv_passfds = spawn
    with signals.handling_stops(), signals.first_stop_sets(lambda s: None) as hits:
        signals.start_forkserver()
        util.spawnv_passfds = real
        from multiprocessing import forkserver
        with ProcessPoolExecutor(1, mp_context=mp.get_context("forkserver")) as pool:
            worker = pool.submit(stops_held, "self").result(timeout=60)
        print(len(spawned), hits == [signal.SIGTERM], stops_held(forkserver._forkserver._forkserver_pid), worker)
"""


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask") or not os.path.exists("/proc/self/status"),
                    reason="POSIX signal masks, Linux /proc")
@pytest.mark.parametrize("nth", [0, 1])   # the resource tracker's start, the fork server's
def test_a_sigterm_while_the_fork_server_starts_is_not_lost(tmp_path, nth) -> None:
    """`hybrid optimize` starts the fork server about 1 s in: a SIGTERM then (tests/cli/test_signals.py's 1 s
    try) was discarded, the two signals being set to SIG_IGN meanwhile, and the search ran on to its time limit.
    It is noted and acted on after, and the fork server and its workers still leave the two signals to us."""
    import subprocess
    import sys
    from pathlib import Path

    if "forkserver" not in __import__("multiprocessing").get_all_start_methods():
        pytest.skip("no fork server on this platform")
    probe = tmp_path / "probe.py"
    probe.write_text(_FORKSERVER_PROBE)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(probe), str(nth)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "True", "True", "True"], (done.stdout, done.stderr)



_HEURISTICS_CTRL_C = """
import os, signal, sys, threading
import numpy as np
from hybrid.arena import exact
from hybrid.arena.problem import Buffer, Problem

signal.signal(signal.SIGINT, signal.default_int_handler)   # a terminal's, also where pytest runs in the background
rng = np.random.default_rng(0)
lo = rng.integers(0, 4000, 6000)
problem = Problem([Buffer(str(i), int(a), int(a + rng.integers(1, 600)), int(rng.integers(1, 1 << 20)))
                   for i, a in enumerate(lo)])
exact.warm_up()            # the exact search's kernels; the heuristics' load (or compile) on the first call below
threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT)).start()
try:
    if sys.argv[1] == "solve":
        exact.solve(problem, time_limit_s=60.0)
    else:
        from hybrid.arena.layout import heuristic_layout
        heuristic_layout(problem)
    print("returned")
except BaseException as e:
    print(type(e).__name__, exact.stopped())
"""


@pytest.mark.parametrize("call", ["solve", "heuristic_layout"])
def test_a_ctrl_c_in_the_arena_heuristics_of_a_library_call_is_a_keyboard_interrupt(call: str) -> None:
    """`hybrid.arena.exact.solve` called from Python, Ctrl-C while its heuristics' kernels load on their first call
    in the process: the handler's KeyboardInterrupt came out of numba's dispatcher as "SystemError:
    CPUDispatcher(<function _place_in_order>) returned a result with an exception set" (bert_large, 5 of 5 at
    0.05-0.2 s). Now the solve stops as at its time limit and the interrupt follows as itself."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _HEURISTICS_CTRL_C, call], capture_output=True, text=True,
                         timeout=600)
    assert out.stdout.split() == ["KeyboardInterrupt", "False"], out.stdout + out.stderr
