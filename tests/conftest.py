"""Session set-up shared by every test folder.

The Numba kernels are compiled once per pytest run, before the first test, so that no test with a time limit
spends it on the compiler. The swap planner's kernels are cached on disk by numba (`cache=True`: seconds after
a fresh clone, then a load); the exact arena search recurses into itself, which numba cannot cache, so it
compiles once per process (about 6 s unloaded, 30 s with both cores busy). Subprocess tests load the cached
kernels from disk; the commands themselves keep the exact search's compile out of their limits.
"""
from __future__ import annotations

import os
import time

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run (the suite's verdict does not change between two runs of
# one commit, as CI's must not); HYPOTHESIS_PROFILE=explore draws fresh ones, to hunt for new failures.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels() -> float:
    """Seconds spent compiling (or loading) the Numba kernels before the first test."""
    from hybrid.pipeline.kernels import load_kernels

    t0 = time.perf_counter()
    load_kernels(repair=True, exact_search=True)   # on a fresh clone: the walk here, the others in a second process
    return time.perf_counter() - t0
