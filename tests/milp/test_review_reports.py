"""What `hybrid milp` says about the plan it writes (a new user's review): a re-solve with less memory that is
written, a plan not laid out, a skipped re-solve's rule, the model's infeasibility (not every plan's), the flag
that keeps persistent tensors resident, a broken start, a start with copies under --no-offload, a start without
--memory, one set of --json keys, the objective beside its bound on one basis, one gap definition, no --out, and
a Ctrl-C before the solve writing the start."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import milp.api as api
from hybrid.device import resolve_device
from hybrid.graph import Graph
from hybrid.graph.synthetic import training_graph
from hybrid.plan import Plan
from hybrid.validator import validate
from milp.api import belady_start, checked_start, infeasible_advice, plan_milp, prepare_start
from milp.model import ModelOptions
from milp.solve import SolveOptions, SolveResult
from milp.stages import memory_refusal
from tests.cli.helpers import hybrid, run

NODES = 500    # branch-and-bound nodes per solve: a work bound, so a run does the same whatever the load


def _setting(memory: str):  # noqa: ANN202
    g = training_graph(4, seed=1, impls_prob=0.6, workspace_prob=0.3)
    return g, resolve_device(g.device, None, memory, None, None, None, None, None)


def _files(tmp_path: Path, memory: str = "14MiB") -> tuple[Graph, Path, Path]:
    """The graph file and Belady's plan at `memory` (a plan with copies)."""
    g, dev = _setting(memory)
    gp = tmp_path / "g.json"
    g.save(gp)
    sp = tmp_path / "start.json"
    belady_start(g, dev).save(sp)
    return g, gp, sp


def _json(output: str) -> dict:
    return json.loads(output[output.index("{"):output.rindex("}") + 1])


# -- 2, 4: the re-solve with less memory, written or skipped ------------------------------------------------------

def _first_layout_fails(monkeypatch: pytest.MonkeyPatch, overflow: float = 0.05) -> list[Plan]:
    """The first plan's layout fails by `overflow` (as a plan that fills the memory does); later ones are laid
    out as they really are. Returns the plans given to the layout."""
    import hybrid.arena.layout as layout

    real = layout.laid_out
    seen: list[Plan] = []

    def first_fails(graph, plan, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append(plan)
        if len(seen) == 1:
            return replace(plan, planner={**plan.planner, "arena": {"laid_out": False, "overflow": overflow,
                                                                     "why": "no arena layout (test)"}})
        return real(graph, plan, *a, **k)
    monkeypatch.setattr(layout, "laid_out", first_fails)
    return seen


def test_a_written_resolve_is_reported_as_such() -> None:
    from hybrid.cli.commands.milp import _report

    g, dev = _setting("20MiB")    # the first plan does not lay out (+36%); the re-solve with 27% less does
    run_ = plan_milp(g, dev, "mosos", None, SolveOptions("highs", 120.0, 0.01, 1, node_limit=NODES))
    assert run_.milp_makespan_s is not None and run_.resolve is not None
    assert run_.written == "milp" and run_.plan.allocation.kind == "arena" and validate(g, run_.plan).valid
    # the re-solve's figures, and the plan file's own record of the memory given up
    assert run_.resolve_memory_bytes is not None and run_.resolve_memory_bytes < dev.memory_bytes
    assert run_.memory_given_up == run_.plan.planner["memory_given_up"] > 0.0
    assert run_.resolve_makespan_s == run_.plan.makespan_s and run_.resolve_result is not None
    assert f"--memory {run_.resolve_memory_bytes}B" in run_.resolve and "written" in run_.resolve
    assert run_.resolve_result.status in run_.resolve and "% over the memory" in run_.resolve
    row = run_.row()
    assert row["resolve_memory_bytes"] == run_.resolve_memory_bytes and row["memory_given_up"] > 0.0
    assert row["resolve_status"] == run_.resolve_result.status and row["laid_out"] is True
    lines = "\n".join(_report(g, run_, "mosos", "highs", dev, run_.plan.metrics))
    resolve_line = next(ln for ln in lines.splitlines() if ln.startswith("re-solve     "))
    assert f"--memory {run_.resolve_memory_bytes}B" in resolve_line and "written" in resolve_line


def test_a_skipped_resolve_names_its_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule is the first build's time plus MIN_RESOLVE_S: the message names both, not the build alone."""
    g, dev = _setting("24MiB")
    _first_layout_fails(monkeypatch)
    monkeypatch.setattr(api, "MIN_RESOLVE_S", 1e6)   # never enough time left: the re-solve is skipped
    run_ = plan_milp(g, dev, "mosos", None, SolveOptions("highs", 120.0, 0.01, 1, node_limit=NODES))
    assert run_.resolve is not None and "skipped" in run_.resolve
    assert "MIN_RESOLVE_S" in run_.resolve and "plus 1e+06 s" in run_.resolve
    assert run_.resolve_memory_bytes is None and run_.row()["laid_out"] is False


def test_a_proof_of_infeasibility_tries_the_least_cut_next() -> None:
    """Just above the least memory the model can plan for, no start: the first plan is 55% over once laid out and
    the re-solve at that cut is infeasible. The least cut goes next; proved infeasible there too, no cut is left
    (less memory never helps the model): two proofs, where halving towards the least cut takes more."""
    # 3 layers at 13.03 MiB (the model has a solution at 13 MiB, none at 12.99): the proofs take a fraction of a
    # second; _setting's 4 layers at 14 MiB took the same path in 9 s, 8 of them proving the least cut infeasible
    g = training_graph(3, seed=0, impls_prob=0.6, workspace_prob=0.3)
    dev = resolve_device(g.device, None, "13.03MiB", None, None, None, None, None)
    run_ = plan_milp(g, dev, "mosos", None, SolveOptions("highs", 120.0, 0.01, 1, node_limit=NODES))
    assert run_.resolve is not None and "2 re-solves with less memory" in run_.resolve, run_.resolve
    first, least = run_.resolve.split("; at ")[:2]
    assert "infeasible" in first and f"({100 * api.LEAST_CUT:.2f}% given up): infeasible" in least
    assert "no re-solve with less memory is left to try" in run_.resolve
    assert run_.plan.allocation.kind != "arena" and validate(g, run_.plan).valid


# -- 3: a plan not laid out says so ---------------------------------------------------------------------------------

def test_the_layout_line_says_when_a_plan_is_not_laid_out() -> None:
    from hybrid.cli.commands.milp import _layout_line

    g, dev = _setting("14MiB")
    plan = belady_start(g, dev)
    loose = replace(plan, planner={**plan.planner, "arena": {"laid_out": False, "overflow": 0.075}})
    if loose.allocation.kind == "arena":
        from hybrid.plan import UnconstrainedAllocation

        loose = replace(loose, allocation=UnconstrainedAllocation())
    line = _layout_line(loose)
    assert line.startswith("layout") and "not laid out (best layout +7.50% over the memory)" in line
    assert "executor" in line
    tiny = replace(loose, planner={**loose.planner, "arena": {"laid_out": False, "overflow": 2e-5}})
    assert "(best layout +0.002% over the memory)" in _layout_line(tiny)   # not '+0.0%'


# -- 6: infeasible is this model's ----------------------------------------------------------------------------------

def test_an_infeasible_model_is_not_said_to_leave_no_plan() -> None:
    g, _dev = _setting("14MiB")
    res = SolveResult("infeasible", "Infeasible", None, None, None, 0.1, False, None)
    n = len(g.ops)
    say = infeasible_advice(g, 3, ModelOptions(stalls=False), "mosos", res)
    assert "the 3-stage model" in say and f"of {n} ops" in say and "--no-stalls" in say
    assert f"more --stages (up to {n}" in say and "a start plan" in say and "no plan fits" not in say
    say = infeasible_advice(g, n, ModelOptions(), "mosos", res)
    assert f"the {n}-stage model is infeasible at this memory" in say and "more --stages" not in say


def test_the_cli_says_which_model_is_infeasible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _g, gp, _sp = _files(tmp_path)
    monkeypatch.setattr(api, "solve", lambda *a, **k: SolveResult("infeasible", "Infeasible", None, None, None,
                                                                  0.1, False, None))
    res = run("milp", "--graph", gp, "--memory", "14MiB", "--no-start", "--stages", "3", "--time-limit", "60s")
    assert res.exit_code != 0
    assert "3-stage model" in res.output and "more --stages" in res.output and "no plan fits" not in res.output


def test_the_build_timeout_advice_says_what_coarsening_costs() -> None:
    from milp.model import fewer_stages

    assert "--stages 71" in fewer_stages(285) and "infeasible" in fewer_stages(285)


# -- 11: the flag that keeps persistent tensors resident ----------------------------------------------------------

def test_the_refusal_names_the_flag_given() -> None:
    g, dev = _setting("2MiB")
    no_off = memory_refusal(g, dev, ModelOptions(offload=False))
    acts = memory_refusal(g, dev, ModelOptions(persistent=False))
    assert no_off is not None and acts is not None
    assert "persistent tensors kept resident" in no_off
    assert "(--no-offload)" in no_off and "--activations-only" not in no_off
    assert "(--activations-only)" in acts and "--no-offload" not in acts


# -- 12, 13, 14: the start --------------------------------------------------------------------------------------------

def test_no_offload_refuses_a_start_with_copies(tmp_path: Path) -> None:
    g, gp, sp = _files(tmp_path)
    assert any(e.kind == "swap_out" for e in Plan.load(sp).events)
    out = tmp_path / "p.json"
    p = hybrid("milp", "--graph", gp, "--memory", "14MiB", "--no-offload", "--start", sp, "--out", out)
    assert p.returncode == 2 and not out.exists()
    assert p.stderr.startswith("error: --start:") and "--no-offload" in p.stderr and "copies" in p.stderr


def test_a_broken_start_is_not_blamed_on_the_memory() -> None:
    g, dev = _setting("14MiB")
    plan = belady_start(g, dev)
    k = next(i for i, e in enumerate(plan.events) if e.kind == "swap_in")
    ev = plan.events[k]
    broken = replace(plan, events=[*plan.events[:k], replace(ev, end_s=ev.start_s + 1e-9), *plan.events[k + 1:]])
    from hybrid.errors import InvalidPlanError

    with pytest.raises(InvalidPlanError) as e:
        checked_start(g, dev, broken)
    assert "on the device it was made for too" in str(e.value) and "this --memory" not in str(e.value)
    small = replace(dev, memory_bytes=int(dev.memory_bytes * 0.6))   # valid on its own device, not on this one
    with pytest.raises(InvalidPlanError) as e:
        checked_start(g, small, plan)
    assert "valid on the device it was made for" in str(e.value)
    assert f"--memory {dev.memory_bytes}B" in str(e.value)


def test_a_start_without_memory_plans_for_its_own(tmp_path: Path) -> None:
    # 6 s: the first solve is done within about 2 s and the re-solve with less memory (no help to what is checked
    # here) is skipped for lack of time; 15 s spent 10 s on two re-solves proved infeasible
    _g, gp, sp = _files(tmp_path, "14MiB")
    p = hybrid("milp", "--graph", gp, "--start", sp, "--time-limit", "6s", "--json")
    assert p.returncode == 0, p.stderr
    d = _json(p.stdout)
    assert d["memory_bytes"] == Plan.load(sp).device.memory_bytes and d["plan"] is None
    assert "--start without --memory" in p.stderr
    p = hybrid("milp", "--graph", gp, "--memory", "14MiB", "--start", sp, "--time-limit", "6s")
    assert p.returncode == 0, p.stderr
    assert "--start without --memory" not in p.stderr
    assert "no --out given" in p.stderr.splitlines()[-1]    # 19: without --out, a line says nothing was written


# -- 15: one set of --json keys, filled from the plan written ---------------------------------------------------------

def test_json_keys_are_the_same_solved_or_not(tmp_path: Path) -> None:
    g, gp, _sp = _files(tmp_path)
    solved_out, start_out = tmp_path / "a.json", tmp_path / "b.json"
    # solved (optimal, the MILP's plan written) in under a second; 5 s leaves too little for a re-solve with less
    # memory, which 15 s spent 9 s on (two proved infeasible): the keys are the same either way
    a = run("milp", "--graph", gp, "--memory", "14MiB", "--time-limit", "5s", "--json", "--out", solved_out)
    # refused before a build (no stage fits with the persistent tensors resident): the start is written
    need = memory_refusal(g, _setting("14MiB")[1], ModelOptions(persistent=False))
    assert need is not None, "14 MiB must be refused with --activations-only for this test"
    b = run("milp", "--graph", gp, "--memory", "14MiB", "--activations-only", "--json", "--out", start_out)
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    da, db = _json(a.output), _json(b.output)
    assert set(da) == set(db)
    assert db["not_solved"] and db["status"] and db["stages"] and db["written"] == "start"
    for d, path in ((da, solved_out), (db, start_out)):
        plan = Plan.load(path)
        assert d["swaps_out"] == sum(1 for e in plan.events if e.kind == "swap_out")
        assert d["swaps_in"] == sum(1 for e in plan.events if e.kind == "swap_in")
        assert d["recomputes"] == sum(1 for e in plan.events if e.kind == "compute" and e.recompute)
        assert d["compute_s"] == pytest.approx(sum(e.end_s - e.start_s for e in plan.events if e.kind == "compute"))
        assert d["laid_out"] == (plan.allocation.kind == "arena")


# -- 9, 19: the objective beside its bound, one gap ------------------------------------------------------------------

def test_the_objective_beside_the_bound_is_the_solvers_own() -> None:
    from hybrid.cli.commands.milp import _objective_line

    g, dev = _setting("14MiB")
    run_ = api.solve_milp(g, dev, "mosos", None, SolveOptions("highs", 60.0, 0.0, 1, node_limit=NODES))
    r = run_.result
    assert r.model_objective_s is not None and r.bound_s is not None
    assert r.model_objective_s >= r.objective_s    # the tie-break adds to compute + recompute + waits
    assert r.bound_s <= r.model_objective_s * (1 + 1e-9)
    assert r.gap == pytest.approx(max(0.0, (r.model_objective_s - r.bound_s) / r.model_objective_s), abs=1e-9)
    line = _objective_line(r)
    assert "with the copies' tie-break" in line and "bound" in line


def test_cbc_reports_the_gap_as_highs_does() -> None:
    from milp.solve import _cbc_path

    try:
        _cbc_path()
    except Exception:  # noqa: BLE001
        pytest.skip("no CBC binary")
    g, dev = _setting("14MiB")
    r = api.solve_milp(g, dev, "mosos", None, SolveOptions("cbc", 60.0, 0.5, 1, node_limit=50), require=False).result
    if r.gap is not None and r.bound_s is not None and r.model_objective_s:
        assert r.gap == pytest.approx(max(0.0, (r.model_objective_s - r.bound_s) / r.model_objective_s), abs=1e-9)
        assert r.gap <= 1.0


# -- 10: Ctrl-C while the model is built writes the start -------------------------------------------------------------

def test_ctrl_c_during_the_build_returns_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    g, dev = _setting("14MiB")
    start = prepare_start(g, dev, belady_start(g, dev))

    def interrupted(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise KeyboardInterrupt
    monkeypatch.setattr(api, "build_model", interrupted)
    run_ = plan_milp(g, dev, "mosos", None, SolveOptions("highs", 60.0, 0.01, 1), start_plan=start,
                     start_name="belady")
    assert run_.written == "start" and run_.plan is start.written and validate(g, run_.plan).valid
    assert run_.not_solved is not None and "interrupted" in run_.not_solved
    with pytest.raises(KeyboardInterrupt):     # no start: nothing to write
        plan_milp(g, dev, "mosos", None, SolveOptions("highs", 60.0, 0.01, 1))



def _stand_in_cbc(tmp_path: Path) -> str:
    """A copy of `sleep` named cbc: a real executable (a script's process names its interpreter) that waits."""
    import shutil
    import subprocess

    sleep = shutil.which("sleep")
    if sleep is None or not Path("/proc").is_dir():
        pytest.skip("needs `sleep` and /proc")
    fake = tmp_path / "cbc"
    shutil.copy(sleep, fake)
    probe = subprocess.Popen([str(fake), "30"])
    try:
        if probe.wait(timeout=0.3) is not None:
            pytest.skip("this `sleep` does not run under another name")
    except subprocess.TimeoutExpired:
        probe.kill()
        probe.wait()
    return str(fake)


def _ended(proc) -> bool:  # noqa: ANN001
    try:
        proc.wait(timeout=30)     # a hang guard only: SIGTERM ends it at once
    except Exception:  # noqa: BLE001
        proc.kill()
        return False
    return True


def test_stop_children_ends_this_processs_children_running_an_executable(tmp_path) -> None:
    import subprocess

    from milp.solve import stop_children

    fake = _stand_in_cbc(tmp_path)
    child = subprocess.Popen([fake, "300"])
    other = subprocess.Popen(["sleep", "300"])      # another executable: left alone
    try:
        assert stop_children(fake) == [child.pid]
        assert _ended(child) and other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_an_interrupted_cbc_solve_stops_cbc_and_leaves_no_files(monkeypatch, tmp_path) -> None:
    """SIGTERM to this process alone ended PuLP's wait, not CBC, which ran on to its time limit (minutes) beside
    the written start, its model files left in the temporary folder."""
    import subprocess
    import tempfile

    import pulp

    import milp.solve as solve

    fake = _stand_in_cbc(tmp_path)
    monkeypatch.setattr(solve, "_cbc_path", lambda: fake)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))    # read once per process: TMPDIR would come late
    started = []

    def interrupted_solve(self, lp, **kwargs):  # noqa: ANN001, ANN003, ANN202
        # what PuLP does, cut short: the model written in the solver's folder, CBC started, then Ctrl-C in the wait
        (Path(self.tmpDir) / "model.mps").write_text("")
        started.append(subprocess.Popen([self.path, "300"]))
        raise KeyboardInterrupt

    monkeypatch.setattr(pulp.COIN_CMD, "actualSolve", interrupted_solve)
    g, dev = _setting("14MiB")
    with pytest.raises(KeyboardInterrupt):
        api.solve_milp(g, dev, "mosos", None, SolveOptions("cbc", 60.0, 0.5, 1), require=False)
    assert started and _ended(started[0])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("hybrid-cbc-")]
