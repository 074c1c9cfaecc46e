"""Library calls from a notebook (API review): a wrong argument is one HybridError line naming it and what to pass
(not a 15 MB message, not a ValueError deep inside a search), and the optimize result prints as one short line
(its dataclass default printed the search's arrays and the layout's trials: 24 KB)."""
from __future__ import annotations

import numpy as np
import pytest

from ga import GAConfig
from hybrid.errors import HybridError
from hybrid.graph.synthetic import training_graph
from hybrid.pipeline import OptimizeOptions, run_optimize
from hybrid.report import frontier
from hybrid.swap.quick_plans import quick_plan
from tests.ga.graphs import small_training


def _one_line(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert "\n" not in text and len(text) < 300, text
    return text


@pytest.mark.parametrize("fraction, says", [
    ("50%", r"fraction .* must be a number, got '50%'; for 50% pass 0.5$"),
    (True, "fraction .* must be a number, got True$"),
    (0, "must be above 0, got 0$"),
    (-0.5, "must not be negative, got -0.5$"),
    (float("nan"), "must be a finite number, got nan$"),
    (None, "must be a number, got None$"),
    (10**400, "is out of range: an integer of 401 digits$"),
    (2**70, r"must be at most 1e\+06, got 1.18059\d+e\+21$"),
])
def test_quick_plan_refuses_a_fraction_that_is_not_a_positive_number(fraction, says) -> None:  # noqa: ANN001
    g = training_graph(4, seed=0)
    with pytest.raises(HybridError, match=says) as e:
        quick_plan(g, fraction)
    _one_line(e)


def test_quick_plan_takes_numbers_and_names_other_bad_arguments() -> None:
    g = training_graph(4, seed=0)
    assert quick_plan(g, np.float64(0.9), kind="unconstrained").graph == g.name
    assert quick_plan(g, 1).graph == g.name
    with pytest.raises(HybridError, match=r"quick_plan: graph must be a hybrid.graph.Graph, got str; load it with "
                                          r"Graph.load\('cnn.json'\)"):
        quick_plan("cnn.json")
    with pytest.raises(HybridError, match="quick_plan: kind must be size_classes or unconstrained, got 'arena'"):
        quick_plan(g, 0.5, kind="arena")


@pytest.mark.parametrize("memories, says", [
    (["4MiB"], r"sweep: memories\[0\] must be a number, got '4MiB'; pass bytes as "
               r"integers, e.g. \[hybrid.units.parse_bytes\('4MiB'\)\], or hybrid.report.frontier.parse_memories"),
    ("4MiB", "sweep: memories must be a list of byte counts, got str '4MiB'"),
    ([2**22, 1.5e6 + 0.5], r"memories\[1\] must be a whole number, got 1500000.5"),
    ([0], r"memories\[0\] must be at least 1, got 0"),
    ([True], r"memories\[0\] must be a number, got True"),
    ([2**80], r"memories\[0\] must be at most 64 PiB, got 1208925819614629174706176"),
    ([], "sweep: memories is empty"),
])
def test_sweep_refuses_memories_that_are_not_bytes_before_any_search(memories, says) -> None:  # noqa: ANN001
    g, dev = small_training(6, seed=1)
    with pytest.raises(HybridError, match=says) as e:
        frontier.sweep(g, dev, memories, 2)
    _one_line(e)


def test_check_memories_reads_numpy_integers_and_parse_memories_output() -> None:
    assert frontier.check_memories(np.array([3, 5], dtype=np.int64)) == [3, 5]
    assert frontier.check_memories(frontier.parse_memories(["4MiB", "50%"], 2**24)) == [2**22, 2**23]


def test_the_optimize_result_and_its_search_print_as_one_short_line() -> None:
    g, dev = small_training(10, seed=2)
    res = run_optimize(g, dev, 60.0, OptimizeOptions(config=GAConfig(population=4, children=4), generations=1,
                                                      workers=1, refine="none"))
    text = repr(res)
    assert "\n" not in text and len(text) < 200, text
    assert text.startswith("OptimizeResult(plan makespan ") and f"{res.plan.allocation.kind} allocation" in text
    assert f"stop {res.stop_reason!r}, {res.search.generations} generations, interrupted False, " in text, text
    search = repr(res.search)
    assert "\n" not in search and len(search) < 200, search
    assert search.startswith("SearchResult(best makespan ") and f"{res.search.evaluations} evaluations" in search
