"""`hybrid optimize`'s "written plan differs" line (OptimizeResult.difference) says no change where there is none:
not "0% less memory", not "(-0.00% makespan)", not "10.72 ms -> 10.72 ms" for a change the printed digits hide."""
from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

from hybrid.arena.layout import Layout
from hybrid.pipeline.result import Budget, OptimizeResult, Refinement, Timings


def _plan(makespan_s: float) -> Any:
    return SimpleNamespace(makespan_s=makespan_s, allocation=SimpleNamespace(kind="arena"), recomputes=[])


def _result(best_s: float, written_s: float, **layout: Any) -> OptimizeResult:
    best, written = _plan(best_s), _plan(written_s)
    lay = Layout(written, layout.pop("fallback", "more memory"), 1, best_s, 0.0, **{"source": "search genes",
                                                                                  **layout})
    return OptimizeResult(written, best, best, SimpleNamespace(stop_reason="generations"), Refinement(), lay,
                          Budget(10.0, 1.0, 9.0, 9.0), Timings())


def _no_change_said_as_one(line: str) -> None:
    assert "0% less memory" not in line and not re.search(r"[-+]0\.00%", line), line
    for a, b in re.findall(r"\(([\d.]+ \w+) -> ([\d.]+ \w+)\)", line):
        assert a != b, line


def test_a_re_plan_with_the_whole_memory_and_a_tiny_change_is_said_as_it_is() -> None:
    line = _result(10.72e-3, 10.7199e-3, memory_given_up=0.0, search_shrink=0.05).difference()
    _no_change_said_as_one(line)
    assert ("laid out in the arena: re-planned (search genes) with the whole usable memory (the headroom search "
            "planned with 5% less) (10.72 ms -> 10.7199 ms); in all -0.0009% makespan") in line, line


def test_an_unchanged_makespan_is_the_same_makespan() -> None:
    line = _result(1.131e-3, 1.131e-3, memory_given_up=0.0, search_shrink=0.05).difference()
    _no_change_said_as_one(line)
    assert line.endswith("(the same makespan, 1.131 ms); in all the same makespan"), line


def test_a_real_change_keeps_its_figures() -> None:
    line = _result(1.1312e-3, 1.1309e-3, fallback="laid-out candidate", source="belady", overflow=0.004
                   ).difference()
    _no_change_said_as_one(line)
    assert ("the plan missed by +0.40%; belady plan, laid out within the memory, was the fastest "
            "(1.1312 ms -> 1.1309 ms); in all -0.03% makespan") in line, line
    line = _result(10e-3, 11e-3, memory_given_up=0.02, search_shrink=0.05).difference()
    assert "with 2% less memory (the headroom search planned with 5% less) (10 ms -> 11 ms); in all +10.00% " \
           "makespan" in line, line


def test_the_layouts_own_line_says_no_change_where_there_is_none() -> None:
    """Layout.describe (the summary's layout line, baseline notes, `hybrid arena`) reads as the difference line."""
    lay = _result(10.72e-3, 10.72e-3, memory_given_up=0.0, search_shrink=0.05).layout
    _no_change_said_as_one(lay.describe())
    assert lay.describe().endswith("with the whole usable memory (the headroom search planned with 5% less) (the "
                                   "same makespan)"), lay.describe()
    lay = _result(10e-3, 10.0001e-3, fallback="re-planned", memory_given_up=0.0, overflow=0.1).layout
    _no_change_said_as_one(lay.describe())
    assert lay.describe() == ("no arena layout within memory (best +10.00% over): re-planned (search genes) with the "
                              "whole usable memory (+0.001% makespan)"), lay.describe()
