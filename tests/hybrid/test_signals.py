"""hybrid.signals in one process (library use: no install(), so a second signal raises rather than exits)."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from hybrid.signals import children_ignore_stops, deferred_interrupts, first_stop_sets, stoppable


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
