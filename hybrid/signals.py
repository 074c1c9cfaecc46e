"""SIGTERM behaves like Ctrl-C, so jobs stopped by `timeout`, Slurm or Kubernetes keep their best result.

Those stop a job with SIGTERM, whose default action kills Python at once: no
plan written, worker processes and semaphores left behind. `sigterm_as_ctrl_c`
(entered once around every command by `hybrid.cli.main`) makes SIGTERM run
whatever currently handles SIGINT: while a search handles Ctrl-C itself
(`ga.termination.stop_on_sigint`: the first one stops the search, which keeps
its best plan) SIGTERM does the same; everywhere else it raises
KeyboardInterrupt, which commands already handle as Ctrl-C (CP-SAT refinement
keeps its best plan; `finally` blocks stop child processes).

Commands need nothing more than their Ctrl-C handling. `interrupted_by()`
names the signal for their messages ("SIGTERM" or "Ctrl-C"), and
`exit_status()` is the conventional 128 + signal number for an interrupted
command that has nothing to show for it.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from types import FrameType
from typing import Iterator

_received: list[int] = []  # SIGTERMs received while installed


def _forward(signum: int, frame: FrameType | None) -> None:
    """SIGTERM: do what the SIGINT handler in force does (a raise from it propagates as from Ctrl-C)."""
    _received.append(signum)
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):  # signal.default_int_handler raises KeyboardInterrupt; a search's handler stops it
        handler(signal.SIGINT, frame)
    else:  # SIG_IGN or SIG_DFL: SIGTERM must still stop the command
        raise KeyboardInterrupt


@contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """While inside (main thread only; elsewhere a no-op), SIGTERM acts as Ctrl-C. Restores the old handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _received.clear()
    old = signal.signal(signal.SIGTERM, _forward)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def interrupted_by() -> str:
    """'SIGTERM' if a SIGTERM arrived during this command, else 'Ctrl-C' (SIGINT, or a KeyboardInterrupt)."""
    return "SIGTERM" if signal.SIGTERM in _received else "Ctrl-C"


def exit_status() -> int:
    """128 + the signal's number: 143 after SIGTERM, 130 after Ctrl-C (what a shell reports for a killed job)."""
    return 128 + int(signal.SIGTERM if signal.SIGTERM in _received else signal.SIGINT)


@contextmanager
def deferred_interrupts() -> Iterator[list[int]]:
    """While inside, a Ctrl-C or SIGTERM is noted (in the yielded list) instead of raised, so that a result
    being finished and written is written whole; a second one raises KeyboardInterrupt, as a second Ctrl-C
    does during a search. Main thread only (elsewhere nothing changes)."""
    hits: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield hits
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if hits:
            raise KeyboardInterrupt
        hits.append(signum)

    old = signal.signal(signal.SIGINT, handler)
    try:
        yield hits
    finally:
        signal.signal(signal.SIGINT, old)


@contextmanager
def children_ignore_stops() -> Iterator[None]:
    """Processes started while inside ignore SIGINT and SIGTERM (an ignored disposition survives fork and exec);
    a signal that reaches this process meanwhile is held and delivered on leaving (Linux keeps a blocked
    signal pending even while it is ignored).

    `timeout` and Slurm send SIGTERM to every process of the job, and Ctrl-C reaches the whole foreground
    group: a worker or fork server killed that way breaks the process pool (BrokenProcessPool, the best plan
    lost), and a worker that outlives its fork server is never told to exit. Helper processes leave stopping
    to the main process, which then shuts them down in order. Main thread only (elsewhere a no-op).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = (signal.SIGINT, signal.SIGTERM)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, sigs) if hasattr(signal, "pthread_sigmask") else None
    old = {s: signal.signal(s, signal.SIG_IGN) for s in sigs}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def start_forkserver() -> None:
    """Start multiprocessing's fork server now, ignoring SIGINT and SIGTERM (`children_ignore_stops`), so the
    evaluation workers it forks do too; call before creating a process pool (a no-op once it runs)."""
    import multiprocessing as mp

    if "forkserver" not in mp.get_all_start_methods():
        return
    from multiprocessing import forkserver

    with children_ignore_stops():
        forkserver.ensure_running()
