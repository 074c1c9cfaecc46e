"""When the running command started, so that `--time-limit` bounds its whole wall time, loading included.

A program (`hybrid ...`) started when its process did: read from /proc on Linux (the interpreter's start and the
commands' imports, seconds under load, count too; not what a shell ran before exec'ing it), else when this module
was first imported, which `hybrid.cli.main` does first thing. A command invoked in a process that runs several
(tests through click's runner) starts when it is invoked (`restart`).
"""
from __future__ import annotations

import os
import time


EXEC_SLACK_S = 2.0   # wall time beyond CPU and run-queue time that a process's start may take (reading files)


def _process_start() -> float:
    """time.monotonic() at this process's start (Linux /proc), else now.

    /proc gives the fork, not the exec: `sh -c 'pip install -e . && hybrid optimize ...'` (CI scripts, Makefiles,
    subprocess with shell=True) runs its last command in the shell's own process, whose start was before the
    install (measured: a fresh clone's README command counted 18.7 s of pip install in its 30 s). A shell waiting
    for its commands neither runs nor waits for a core, so the process is counted from at most its CPU time, its
    time waiting for a core (/proc/self/schedstat) and EXEC_SLACK_S ago: about this interpreter's start."""
    now = time.monotonic()
    try:
        with open("/proc/self/stat") as f:  # noqa: SIM115 - read only
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])   # field 22: start time, clock ticks after boot
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        ago = uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return now
    ago = min(ago, time.process_time() + _waited_for_a_core() + EXEC_SLACK_S)
    return now - ago if 0.0 <= ago < 600.0 else now   # implausible (clock adjusted): from now


def _waited_for_a_core() -> float:
    """Seconds this process has spent runnable but waiting for a core (Linux schedstat), 0 where unknown."""
    try:
        with open("/proc/self/schedstat") as f:  # noqa: SIM115 - read only
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


_start = _process_start()


def restart() -> None:
    """The command starts now (a second command in one process)."""
    global _start
    _start = time.monotonic()


def started() -> float:
    """time.monotonic() when the command started."""
    return _start


def deadline(time_limit_s: float) -> float:
    """time.monotonic() by which a command given `time_limit_s` must have finished."""
    return _start + time_limit_s


def left(time_limit_s: float) -> float:
    """Seconds left of `time_limit_s` counted from the command's start (negative once past)."""
    return _start + time_limit_s - time.monotonic()
