"""One exception type for every user-facing failure.

The CLI prints `error: <message>` on one line for these (never a traceback), so
messages must name the offending id, field or flag and say what to do.
"""
from __future__ import annotations


class HybridError(Exception):
    """A problem with the user's input or request, reported as one clear line."""


def first_line(e: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message (its type's name if it has none), cut to `limit` characters:
    what a one-line error quotes of the user's code failing."""
    text = str(e).strip() or type(e).__name__
    line = text.splitlines()[0].strip()
    return line if len(line) <= limit else line[:limit - 3] + "..."


def require_instance(name: str, value: object, typ: type, what: str) -> None:
    """HybridError naming the argument `name` of the wrong type, for a library caller (a path given for a graph,
    say): one line, not an AttributeError from deep inside. `what` says what to give, e.g.
    "hybrid.plan.Plan (Plan.load(path))"."""
    if not isinstance(value, typ):
        raise HybridError(f"{name} must be a {what}, got {type(value).__name__} {value!r:.60}")


class FormatError(HybridError):
    """A graph or plan file that breaks FORMATS.md."""


class InfeasibleError(HybridError):
    """No plan exists under the requested memory (an op alone does not fit, a pool too small).

    Where the least memory that lets a plan run is known, `least_usable_bytes` holds it (what a plan may fill,
    beside the device's reserve) and `advice` the phrase of the message that asks for it, so a command that takes
    memory another way (frontier's --memories) words its own advice without parsing this one's."""

    def __init__(self, message: str, least_usable_bytes: int | None = None, advice: str = "") -> None:
        super().__init__(message)
        self.least_usable_bytes = least_usable_bytes
        self.advice = advice


class NothingWrittenError(HybridError):
    """A command cannot act on its input (a plan it cannot refine, a plan that fails validation): it says why
    in one line, writes nothing and exits 1, as `hybrid validate` does for an invalid plan."""

    exit_status = 1


class InvalidPlanError(NothingWrittenError):
    """A plan a command was given, or was about to write, fails validation."""
