"""When the search stops: a time limit, a generation count, Ctrl-C, or a plan as fast as any can be.

The first Ctrl-C or SIGTERM asks the search to stop (the generation being evaluated is
abandoned, the best plan so far is kept); a second one interrupts at once (`hybrid.signals`).
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

from hybrid.errors import HybridError


@dataclass
class Termination:
    time_limit_s: float | None = None
    generations: int | None = None      # total, counting generations done before a resume
    start: float = field(default_factory=time.monotonic)
    interrupted: bool = False
    # Stop once best() <= target_s: at the lower bound no plan can be faster, and every further generation
    # would be spent for nothing (a graph that fits reaches it at generation 0)
    target_s: float | None = None
    best: Callable[[], float] | None = None

    def __post_init__(self) -> None:
        if self.time_limit_s is None and self.generations is None:
            raise HybridError("give the search a budget: a time limit (--time-limit 30m) or --generations N")
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise HybridError(f"--time-limit must be positive, got {self.time_limit_s} s")
        if self.generations is not None and self.generations < 0:
            raise HybridError(f"--generations must not be negative, got {self.generations}")

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def time_left(self) -> float | None:
        return None if self.time_limit_s is None else max(0.0, self.time_limit_s - self.elapsed())

    def expired(self) -> bool:
        """Stop now, even mid-generation (interrupt or time limit)."""
        return self.interrupted or (self.time_limit_s is not None and self.elapsed() >= self.time_limit_s)

    def reason(self, generation: int) -> str | None:
        """Why the search should stop before starting generation `generation + 1`, or None."""
        if self.interrupted:
            return "interrupted"
        if self.target_s is not None and self.best is not None and self.best() <= self.target_s:
            return "lower bound"
        if self.time_limit_s is not None and self.elapsed() >= self.time_limit_s:
            return "time limit"
        if self.generations is not None and generation >= self.generations:
            return "generations"
        return None


@contextmanager
def stop_on_sigint(term: Termination) -> Iterator[Termination]:
    """While inside, the first Ctrl-C or SIGTERM sets `term.interrupted` (the search stops after the candidates
    being evaluated and keeps its best); a second one stops at once (`hybrid.signals.first_stop_sets`)."""
    from hybrid.signals import first_stop_sets

    def stop(signum: int) -> None:
        term.interrupted = True

    with first_stop_sets(stop):
        yield term
