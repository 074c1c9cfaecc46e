"""`plan_milp`'s deadline is the whole run's: the solver gets what the build left, less what is kept back for
decoding, layout and validation; a build that eats the budget still returns the start; a re-solve with less
memory is skipped when there is no time for it. The clock is faked (time.monotonic moved forward), so the
tests check the budget handed out, not wall times."""
from __future__ import annotations

import time
from dataclasses import replace

import pytest

import milp.api as api
from hybrid.device import resolve_device
from hybrid.graph.synthetic import training_graph
from hybrid.validator import validate
from milp.api import belady_start, plan_milp, post_solve_s, prepare_start
from milp.model import BuildTimeError
from milp.solve import SolveOptions


NODES = 500    # branch-and-bound nodes per solve: the work bound (the fake deadlines are far off)


class FakeClock:
    """time.monotonic() moved forward by `advance` (what a slow build or solve would have taken)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.offset = 0.0
        real = time.monotonic
        monkeypatch.setattr(time, "monotonic", lambda: real() + self.offset)

    def advance(self, s: float) -> None:
        self.offset += s


def _setting(memory: str):  # noqa: ANN202
    g = training_graph(4, seed=1, impls_prob=0.6, workspace_prob=0.3)
    return g, resolve_device(g.device, None, memory, None, None, None, None, None)


def test_the_solver_gets_what_the_build_left(monkeypatch: pytest.MonkeyPatch) -> None:
    # 3 layers at 16 MiB: the MILP's plan is written, its re-solves with less memory (not the point here) take
    # under a second; _setting's 4 layers at 14 MiB spent 8 s of each run proving one infeasible
    g = training_graph(3, seed=0, impls_prob=0.6, workspace_prob=0.3)
    dev = resolve_device(g.device, None, "16MiB", None, None, None, None, None)
    start = prepare_start(g, dev, belady_start(g, dev))
    limits = {}
    for build_takes in (0.0, 100.0):
        clock = FakeClock(monkeypatch)
        real_build = api.build_model

        def slow_build(*a, _real=real_build, _clock=clock, _s=build_takes, **k):  # noqa: ANN002, ANN003, ANN202
            model = _real(*a, **k)
            _clock.advance(_s)
            return model
        monkeypatch.setattr(api, "build_model", slow_build)
        so = SolveOptions("highs", 10_000.0, 0.01, 1, deadline=time.monotonic() + 300.0, node_limit=NODES)
        run = plan_milp(g, dev, "mosos", None, so, start_plan=start, start_name="belady")
        monkeypatch.undo()
        assert run.kept_back_s == pytest.approx(post_solve_s(g, start)) and run.kept_back_s > api.DECODE_S
        assert run.result.limit_s is not None and 0.0 < run.result.limit_s <= 300.0 - build_takes - run.kept_back_s
        assert validate(g, run.plan).valid
        assert run.plan.makespan_s <= start.auto.makespan_s * (1 + 1e-9)
        limits[build_takes] = run.result.limit_s
    # the 100 s the build took come off the solver's limit, whatever the real build and solve took
    assert limits[100.0] < limits[0.0] - 100.0 + 30.0


def test_a_build_past_the_deadline_returns_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    g, dev = _setting("14MiB")
    start = prepare_start(g, dev, belady_start(g, dev))
    clock = FakeClock(monkeypatch)
    real = api.build_problem

    def slow_problem(*a, **k):  # noqa: ANN002, ANN003, ANN202 - the stage problem took the whole budget
        pb = real(*a, **k)
        clock.advance(1_000.0)
        return pb
    monkeypatch.setattr(api, "build_problem", slow_problem)
    so = SolveOptions("highs", 600.0, 0.01, 1, deadline=time.monotonic() + 600.0)
    run = plan_milp(g, dev, "mosos", None, so, start_plan=start, start_name="belady")
    assert run.not_solved is not None and "did not finish within the time limit" in run.not_solved
    assert run.written == "start" and run.plan is start.written and validate(g, run.plan).valid
    with pytest.raises(BuildTimeError):       # no start: nothing to write, a one-line error
        plan_milp(g, dev, "mosos", None, replace(so, deadline=time.monotonic() + 600.0))


def test_no_time_left_after_the_start_skips_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    g, dev = _setting("14MiB")
    start = prepare_start(g, dev, belady_start(g, dev))
    built = []
    monkeypatch.setattr(api, "build_problem", lambda *a, **k: built.append(1))
    so = SolveOptions("highs", 600.0, 0.01, 1, deadline=time.monotonic() + 0.5 * api.post_solve_s(g, start))
    run = plan_milp(g, dev, "mosos", None, so, start_plan=start, start_name="belady")
    assert not built and run.not_solved is not None and "no time left" in run.not_solved
    assert run.plan is start.written


def test_a_resolve_without_time_for_its_build_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """24 MiB, no start: the first plan does not lay out (the re-solve with less memory is wanted), but the
    first solve left less than its build took plus MIN_RESOLVE_S: the re-solve is skipped and says so."""
    g, dev = _setting("24MiB")
    clock = FakeClock(monkeypatch)
    deadline = time.monotonic() + 10_000.0
    keep = post_solve_s(g, None)
    real = api.solve
    solves = []

    def solve_then_late(*a, **k):  # noqa: ANN002, ANN003, ANN202
        res = real(*a, **k)
        solves.append(res)
        clock.advance(deadline - keep - time.monotonic() - 2.0)   # 2 s left for anything more
        return res
    monkeypatch.setattr(api, "solve", solve_then_late)
    run = plan_milp(g, dev, "mosos", None, SolveOptions("highs", 10_000.0, 0.01, 1, deadline=deadline,
                                                                node_limit=NODES))
    assert len(solves) == 1 and run.resolve is not None and "skipped" in run.resolve
    assert run.plan is not None and validate(g, run.plan).valid
    assert run.plan.planner["arena"]["laid_out"] is False   # the byte-budget plan, as the docstring says


def test_a_build_past_its_deadline_stops_before_its_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """The build's first loop, the rerun variables, checked no deadline: on rnn-8-8k's 2,872 stages it alone took
    6 s, and `hybrid milp --time-limit 5s` ended at 8.6-9.4 s. A build past its deadline now stops before them."""
    import milp.model as model
    from milp.stages import build_problem

    g, dev = _setting("14MiB")
    pb = build_problem(g, dev)
    made: list[str] = []
    real = model.new_var
    monkeypatch.setattr(model, "new_var", lambda lp, name, *a, **k: made.append(name) or real(lp, name, *a, **k))
    with pytest.raises(BuildTimeError):
        model.build_model(pb, deadline=time.monotonic() - 1.0)
    assert made == []
    model.build_model(pb)      # and without a deadline, they are all made
    assert any(n.startswith("R_") for n in made)
