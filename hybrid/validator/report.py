"""What the validator hands back: violations (rule, one-line message, event) and the report."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Violation:
    """One broken rule.

    `rule` is 1..7 from docs/formats.md, or 0 for a plan that does not fit the
    graph at all (another graph's name or sha256, unknown ids or impls).
    `event_index` indexes `plan.events` in file order; None when the problem is
    not about one event (the schedule, a pool size, a missing metric).
    """

    rule: int
    message: str
    event_index: int | None = None

    def __str__(self) -> str:
        return f"rule {self.rule}: {self.message}"


@dataclass(frozen=True)
class ValidationReport:
    valid: bool
    violations: list[Violation] = field(default_factory=list)
    peak_bytes: int = 0
    found: int = 0          # violations found in all, where `violations` holds only the first (validate's all=False)

    def __bool__(self) -> bool:
        return self.valid

    @property
    def first(self) -> Violation | None:
        return self.violations[0] if self.violations else None


@dataclass(frozen=True, order=True)
class Found:
    """A violation with the key that orders it within its rule: (time, file index).

    Plan-level findings (no event) sort before every event.
    """

    time: float
    index: int
    violation: Violation = field(compare=False)
