"""One exception type for every user-facing failure.

The CLI prints `error: <message>` on one line for these (never a traceback), so
messages must name the offending id, field or flag and say what to do.
"""
from __future__ import annotations


class HybridError(Exception):
    """A problem with the user's input or request, reported as one clear line."""


class FormatError(HybridError):
    """A graph or plan file that breaks FORMATS.md."""


class InfeasibleError(HybridError):
    """No plan exists under the requested memory (an op alone does not fit, a pool too small)."""
