"""Ctrl-C and SIGTERM, at any moment of any command: the first stops the work and keeps its best result, a second
one stops the process at once.

`timeout`, Slurm and Kubernetes stop a job with SIGTERM, whose default action kills Python at once: no result
written, worker processes left behind. `hybrid.cli.main` therefore calls `install()` first thing, from the main
thread and before any other thread starts: from then on SIGINT and SIGTERM both run `_on_signal` (Python runs
signal handlers in the main thread, whichever thread the kernel picked), which

- on the first signal: calls the innermost `first_stop_sets` callback when one is active (a search then stops
  after the generation it is in and its best plan is written; `deferred_interrupts` lets a result being written
  finish), else raises KeyboardInterrupt, which commands handle as Ctrl-C (refinement keeps its best plan,
  `execute` writes the iterations it measured, a command with nothing to show exits 130/143);
- on the second (not the same signal within REPEAT_S of the first: `timeout` delivers its one SIGTERM twice, to
  the process and to its group): `exit_now`: kills this process's child processes, removes the temporary files
  of writes in flight (`hybrid.files`), prints one line and exits 130 (Ctrl-C) or 143 (SIGTERM) without
  unwinding.

Nothing ever sets SIGINT or SIGTERM to SIG_IGN in this process: a signal ignored for a moment (while a child
process starts, so that it inherits the disposition) is discarded when another thread (numba, OR-Tools, a queue's
feeder) takes it, and was the cause of lost signals. Child processes are started with the two signals *blocked*
instead (`children_ignore_stops`): a blocked signal stays pending, the mask survives fork and exec, so helpers are
born deaf to the job's SIGTERM and leave stopping to this process.

A KeyboardInterrupt raised by the handler inside native code that calls back into Python is lost or changed
(dropped in a ctypes callback such as llvmlite's object cache while Numba loads kernels; an ImportError inside a
C extension's module initialisation): around such code `interrupts_after` notes the signal and acts on it when
the block ends, and `hybrid.cli.main` reports an exception raised while a stop is handled as the interrupt.

In a library (no `install()`), `first_stop_sets` handles SIGINT itself while inside, and a second signal raises
KeyboardInterrupt instead of exiting. `interrupted_by()` names the signal for messages; `exit_status()` is the
conventional 128 + signal number.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from types import FrameType
from typing import Callable, Iterator, TypeVar

STOPS = (signal.SIGINT, signal.SIGTERM)
T = TypeVar("T")

REPEAT_S = 0.5   # the same signal again within this is the same stop: `timeout` sends it to the process and then
#                  to its process group at once, and the second, taken as "stop at once", lost the best plan
_received: list[int] = []             # signals received during this command, oldest first
_last_at = [float("-inf")]            # time.monotonic() of the last signal counted in `_received`
_soft: list[list] = []                # active first_stop_sets contexts: [callback, hits]
_hard = False                         # install() ran: a second signal exits at once
_starting = False                     # install() ran and no command has started yet: any signal exits at once
_cleanups: list[Callable[[], None]] = []   # run by exit_now (hybrid.files removes its temporary files)
_commands = 0                         # handling_stops contexts open (a CLI command runs inside one)


def _name(signum: int) -> str:
    return "SIGTERM" if signum == signal.SIGTERM else "Ctrl-C"


def exit_now(signum: int, message: str = "interrupted again ({}): stopped at once") -> None:
    """Stop the process now: kill child processes, run the registered cleanups, say so, exit 128 + signum."""
    import multiprocessing as mp

    try:
        for child in mp.active_children():  # pool workers, the refiner: their signals are blocked, SIGKILL is not
            child.kill()
    except Exception:  # noqa: BLE001 - exiting regardless
        pass
    for fn in list(_cleanups):
        try:
            fn()
        except Exception:  # noqa: BLE001
            pass
    try:  # os.write: the main thread may have been inside a write to sys.stderr when the signal came
        os.write(2, (message.format(_name(signum)) + "\n").encode())
    except OSError:
        pass
    os._exit(128 + int(signum))


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """The one handler of SIGINT and SIGTERM (see the module's docstring)."""
    now = time.monotonic()
    if _received and _received[-1] == signum and now - _last_at[0] < REPEAT_S:
        return                     # one stop delivered twice (GNU timeout signals the process, then its group)
    _last_at[0] = now
    _received.append(signum)
    if _starting:                  # still importing: nothing to keep, and a KeyboardInterrupt would print a traceback
        exit_now(signum, "interrupted ({})")
    if _hard and len(_received) > 1:
        exit_now(signum)
    _dispatch(signum)


def _dispatch(signum: int) -> None:
    """A first signal: to the innermost `first_stop_sets` context, else KeyboardInterrupt."""
    if _soft:
        ctx = _soft[-1]
        if ctx[1]:                 # a second signal inside one context (library use): interrupt at once
            raise KeyboardInterrupt
        ctx[1].append(signum)
        ctx[0](signum)
        return
    raise KeyboardInterrupt


def install() -> None:
    """Route SIGINT and SIGTERM to `_on_signal` for the rest of the process, second signal exiting at once.

    Call from the main thread before any other thread starts (`hybrid.cli.main.main` does). A signal ignored by
    whoever started this process (`nohup`, a shell's background job for SIGINT) stays ignored."""
    global _hard, _starting
    if threading.current_thread() is not threading.main_thread():
        return
    for s in STOPS:
        if signal.getsignal(s) is not signal.SIG_IGN:
            signal.signal(s, _on_signal)
    _hard = _starting = True
    # `exit_now` ends the process without shutting its process pool down: multiprocessing's resource tracker (a
    # process started with this one's -W options) then frees the pool's semaphores, as it should, but printed
    # "UserWarning: resource_tracker: There appear to be 11 leaked semaphore objects to clean up at shutdown"
    # and the code line after the one-line "stopped at once" (helper-121: `hybrid optimize`, Ctrl-C twice)
    if _TRACKER_QUIET not in sys.warnoptions:
        sys.warnoptions.append(_TRACKER_QUIET)


_TRACKER_QUIET = "ignore::UserWarning:multiprocessing.resource_tracker"


def register_cleanup(fn: Callable[[], None]) -> None:
    """Run `fn` when a second signal stops the process at once (it must be quick and must not raise)."""
    if fn not in _cleanups:
        _cleanups.append(fn)


@contextmanager
def handling_stops() -> Iterator[None]:
    """Around one command: a fresh count of signals, SIGINT and SIGTERM routed to `_on_signal` (restored after).
    Main thread only (elsewhere a no-op); `hybrid.cli.main` enters it around every command."""
    global _starting, _commands
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    _starting = False
    old = {s: signal.getsignal(s) for s in STOPS}
    for s, h in old.items():
        if h is not signal.SIG_IGN:  # ignored by whoever started this process: stays ignored, as in install()
            signal.signal(s, _on_signal)
    _commands += 1
    try:
        yield
    finally:
        _commands -= 1
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def new_call() -> None:
    """A library call's fresh count of signals, as `handling_stops` starts one per command: in a notebook, one
    interrupted `run_optimize` left its Ctrl-C counted, and every later call read it (a placement search stopped
    at once, a MILP skipped its re-solve "after Ctrl-C"). Inside a command (the CLI), the command's count stays."""
    if not _commands:
        _received.clear()



@contextmanager
def first_stop_sets(callback: Callable[[int], None]) -> Iterator[list[int]]:
    """While inside, the first Ctrl-C or SIGTERM calls `callback(signum)` instead of raising KeyboardInterrupt
    (the yielded list records it); a second one exits at once under `install()`, else raises KeyboardInterrupt.
    Main thread only (elsewhere a no-op). Outside the CLI (handlers not routed here) SIGINT is taken over while
    inside and restored after."""
    ctx: list = [callback, []]
    if threading.current_thread() is not threading.main_thread():
        yield ctx[1]
        return
    previous = signal.getsignal(signal.SIGINT)
    # taken over unless routed here already, or ignored by whoever started this process (`nohup`, a shell's
    # background job): that stays ignored, as install() leaves it (it was acted on inside here only, so a job's
    # Ctrl-C was dropped at one moment and stopped the search at another)
    own = previous is not _on_signal and previous is not signal.SIG_IGN
    if own:
        signal.signal(signal.SIGINT, _on_signal)
    _soft.append(ctx)
    try:
        yield ctx[1]
    finally:
        _soft.remove(ctx)
        if own:
            signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)


def stoppable(work: Callable[[], T], stop: Callable[[], None]) -> T:
    """`work()` run in a helper thread while this one waits, so that Ctrl-C or SIGTERM are handled during a long
    native call (a CP-SAT solve holds the main thread in C++, where Python runs no signal handler): the first
    calls `stop()` (e.g. the solver's StopSearch, which then returns its best so far), a second exits at once
    under `install()`. Returns what `work` returned, or raises what it raised. Main thread only (elsewhere
    `work()` is just called)."""
    if threading.current_thread() is not threading.main_thread():
        return work()
    out: list = []

    def run() -> None:
        try:
            out.append((True, work()))
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            out.append((False, e))

    helper = threading.Thread(target=run, name="hybrid-stoppable", daemon=True)
    with first_stop_sets(lambda signum: stop()):
        helper.start()
        while helper.is_alive():
            helper.join(timeout=0.1)
    ok, value = out[0]
    if not ok:
        raise value
    return value


def received() -> bool:
    """Whether a Ctrl-C or SIGTERM has arrived during this command."""
    return bool(_received)


def interrupted_by() -> str:
    """'SIGTERM' if a SIGTERM arrived during this command, else 'Ctrl-C' (SIGINT, or a KeyboardInterrupt)."""
    return "SIGTERM" if signal.SIGTERM in _received else "Ctrl-C"


def exit_status() -> int:
    """128 + the signal's number: 143 after SIGTERM, 130 after Ctrl-C (what a shell reports for a killed job)."""
    return 128 + int(signal.SIGTERM if signal.SIGTERM in _received else signal.SIGINT)


@contextmanager
def deferred_interrupts() -> Iterator[list[int]]:
    """While inside, a Ctrl-C or SIGTERM is noted (in the yielded list) instead of raised, so that a result being
    finished and written is written whole; a second one stops at once (`first_stop_sets`)."""
    with first_stop_sets(lambda signum: None) as hits:
        yield hits


@contextmanager
def interrupts_after(stop: Callable[[], None] | None = None) -> Iterator[list[int]]:
    """While inside, a first Ctrl-C or SIGTERM is noted and acted on when the block ends, as if it came then;
    `stop()`, where given, is called at the signal (to end a native loop early: the arena's exact search). The
    yielded list records the signal.

    For native code that calls back into Python, where a KeyboardInterrupt raised by the handler is lost or
    changed: inside a ctypes callback (llvmlite's object cache, while Numba compiles or loads kernels) it is
    printed as "Exception ignored" and the command ran on to its time limit; inside a C extension's module
    initialisation (OR-Tools' cp_model) it became "ImportError: initialization failed" and the command exited 1.
    Both measured with `python benchmarks/signals.py` (a SIGTERM at 0.6-1.0 s). A second signal inside stops at
    once under `install()`."""
    with first_stop_sets(lambda signum: None if stop is None else stop()) as hits:
        try:
            yield hits
        except SystemError as e:
            # a second signal's KeyboardInterrupt (library use) raised inside native code: numba's dispatcher
            # hands it back as "SystemError: ... returned a result with an exception set"; it is the interrupt
            if isinstance(e.__cause__, KeyboardInterrupt) or isinstance(e.__context__, KeyboardInterrupt):
                raise KeyboardInterrupt from None
            raise
    if hits:
        _dispatch(hits[0])


@contextmanager
def children_ignore_stops() -> Iterator[None]:
    """Processes started while inside are born with SIGINT and SIGTERM blocked (the signal mask survives fork and
    exec), so they leave stopping to this process; the calling thread blocks them meanwhile, and a signal that
    arrives then is handled by this process all the same (by another thread's handler, or on leaving).

    `timeout` and Slurm send SIGTERM to every process of the job, and Ctrl-C reaches the whole foreground group: a
    worker or fork server killed that way breaks the process pool (BrokenProcessPool, the best plan lost). Helper
    processes stop when this one tells them to, or are killed (SIGKILL) by `exit_now`. Nothing is set to SIG_IGN
    here (see the module's docstring). Main thread only (elsewhere a no-op).
    """
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    # another thread may take the signal meanwhile, and Python then runs the handler in this thread, inside the
    # start of a process: a KeyboardInterrupt there leaves a child half started. So the signal is only noted
    # here and acted on once the child has started, as if it came then.
    with first_stop_sets(lambda signum: None) as hits:
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    if hits:  # acted on now, as it would have been outside
        _dispatch(hits[0])


def start_forkserver() -> None:
    """Start multiprocessing's fork server now with SIGINT and SIGTERM blocked (`children_ignore_stops`), so the
    evaluation workers it forks are too; call before creating a process pool (a no-op once it runs)."""
    import multiprocessing as mp

    if "forkserver" not in mp.get_all_start_methods():
        return
    from multiprocessing import forkserver, resource_tracker

    # The fork server and the workers it forks must also survive a SIGTERM sent to the whole job (a worker killed
    # breaks the pool): they are born with the two signals blocked, like every helper. The resource tracker is
    # started first, on its own: its start (which the fork server's would make) unblocks SIGINT and SIGTERM in the
    # calling thread whatever the mask was (CPython 3.11's ResourceTracker.ensure_running: SIG_UNBLOCK, not a
    # restore), so they are blocked again before the fork server starts. They were once set to SIG_IGN here
    # instead, for the two processes' start (about 10 ms, at about 1 s into `hybrid optimize`): a SIGTERM that
    # arrived then was discarded and the search ran on to its time limit (tests/hybrid/test_signals.py).
    with children_ignore_stops():
        resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
        forkserver.ensure_running()


def cp_sat_solver():  # noqa: ANN201 - ortools.sat.python.cp_model.CpSolver
    """A CP-SAT solver that leaves Ctrl-C to this module. OR-Tools' default (`catch_sigint_signal`) installs its own
    SIGINT handler during each solve: it ends that solve and swallows the signal, so a loop of solves (refinement's
    windows) ran on to its time limit after a Ctrl-C while SIGTERM stopped it. Without it, `_on_signal` sees the
    signal when the solve returns (each is short) and the caller stops as for SIGTERM."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.catch_sigint_signal = False
    return solver
