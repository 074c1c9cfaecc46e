"""`hybrid simulate --from PLAN`: the plan's schedule, pool and device are kept, and what it cannot keep is said."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from hybrid.graph.synthetic import training_graph
from hybrid.plan import ArenaAllocation, Plan, SizeClassAllocation, UnconstrainedAllocation
from tests.cli.helpers import run

MIB = 1 << 20


@pytest.fixture
def graph(tmp_path: Path) -> Path:
    """A small training graph whose own device has 64 MiB: 20 MiB makes its plans swap (its unswapped peak is 35 MiB)."""
    path = tmp_path / "g.json"
    training_graph(12, seed=4, share_params=6).save(path)
    return path


def _plan(graph: Path, out: Path, *flags: object) -> Plan:
    r = run("simulate", "--graph", graph, "--memory", "20MiB", *flags, "--out", out)
    assert r.exit_code == 0, r.output
    return Plan.load(out)


def test_from_keeps_the_plans_device(graph: Path, tmp_path: Path) -> None:
    """Before: the re-plan ran on the graph's 64 MiB, no swaps at all, and nothing said so."""
    src = _plan(graph, tmp_path / "p.json")
    assert src.device.memory_bytes == 20 * MIB and src.metrics["bytes_h2d"] > 0
    r = run("simulate", "--graph", graph, "--from", tmp_path / "p.json", "--out", tmp_path / "q.json")
    assert r.exit_code == 0, r.output
    q = Plan.load(tmp_path / "q.json")
    assert q.device == src.device and q.schedule == src.schedule
    assert q.metrics["bytes_h2d"] > 0 and q.metrics["peak_bytes"] <= 20 * MIB
    assert "differs" not in r.output


def test_from_with_device_flags_changes_the_plans_device_and_says_so(graph: Path, tmp_path: Path) -> None:
    src = _plan(graph, tmp_path / "p.json")
    r = run("simulate", "--graph", graph, "--from", tmp_path / "p.json", "--memory", "40MiB",
            "--out", tmp_path / "q.json")
    assert r.exit_code == 0, r.output
    assert Plan.load(tmp_path / "q.json").device.memory_bytes == 40 * MIB
    assert "note: the device (--memory) differs from the plan's: memory 20 MiB -> 40 MiB" in r.output
    # a flag changes only its own field: the rest (here the 20 MiB) stays the plan's, not the graph's
    r = run("simulate", "--graph", graph, "--from", tmp_path / "p.json", "--h2d", "6GB/s", "--json")
    assert r.exit_code == 0, r.output
    assert '"memory_bytes": 20971520' in r.output and "h2d 12 GB/s -> 6 GB/s" in r.output
    assert src.device.h2d_bytes_per_s == 12e9


def test_from_an_arena_plan_re_plans_it_with_a_byte_budget(graph: Path, tmp_path: Path) -> None:
    """Before: `the swap planner works with size_classes or unconstrained allocations, not 'arena'` (exit 2)."""
    src = _plan(graph, tmp_path / "p.json")
    r = run("arena", "--graph", graph, "--plan", tmp_path / "p.json", "--time-limit", "3s",
            "--out", tmp_path / "a.json")
    assert r.exit_code == 0, r.output
    arena = Plan.load(tmp_path / "a.json")
    assert isinstance(arena.allocation, ArenaAllocation)
    r = run("simulate", "--graph", graph, "--from", tmp_path / "a.json", "--out", tmp_path / "q.json")
    assert r.exit_code == 0, r.output
    assert "offsets are dropped" in r.output and "hybrid arena --graph" in r.output
    q = Plan.load(tmp_path / "q.json")
    assert isinstance(q.allocation, UnconstrainedAllocation)
    assert q.schedule == arena.schedule and q.device == src.device
    assert run("arena", "--graph", graph, "--plan", tmp_path / "q.json", "--time-limit", "3s",
               "--out", tmp_path / "qa.json").exit_code == 0
    assert "arena plan" in " ".join(run("simulate", "--help").output.split())


def test_from_size_classes_on_less_memory_says_how_much_memory(graph: Path, tmp_path: Path) -> None:
    """Before: `... lower the class counts`, which no flag of simulate can do."""
    src = _plan(graph, tmp_path / "p.json", "--allocation", "size-classes")
    assert isinstance(src.allocation, SizeClassAllocation)
    r = run("simulate", "--graph", graph, "--from", tmp_path / "p.json", "--memory", "4MiB")
    assert r.exit_code == 2 and r.output.startswith("error: --memory: ") and "class counts" not in r.output
    need = int(re.search(r"give --memory (\d+)MiB or more", r.output).group(1))
    assert 4 < need <= 20
    assert run("simulate", "--graph", graph, "--from", tmp_path / "p.json", "--memory", f"{need}MiB").exit_code == 0
    r = run("simulate", "--graph", graph, "--from", tmp_path / "p.json", "--memory", f"{need - 1}MiB")
    assert r.exit_code == 2 and f"give --memory {need}MiB" in r.output


@pytest.mark.parametrize("flag,named", [(["--schedule", "dfs"], "--schedule"), (["--pool", "classes"], "--pool"),
                                        (["--allocation", "size-classes"], "--pool"),
                                        (["--schedule", "program"], "--schedule")])
def test_from_refuses_the_flags_it_overrides(graph: Path, tmp_path: Path, flag: list[str], named: str) -> None:
    """Before: ignored without a word. --allocation is --pool's older spelling: the error names --pool."""
    _plan(graph, tmp_path / "p.json")
    r = run("simulate", "--graph", graph, "--from", tmp_path / "p.json", *flag)
    assert r.exit_code == 2 and r.output.startswith(f"error: {named} with --from"), r.output


def test_recency_must_not_be_negative(graph: Path, tmp_path: Path) -> None:
    """Before: -5 was accepted and recorded in the plan (the planner reads any value <= 0 as 0)."""
    r = run("simulate", "--graph", graph, "--memory", "20MiB", "--recency", "-5", "--out", tmp_path / "p.json")
    assert r.exit_code == 2 and "--recency" in r.output and not (tmp_path / "p.json").exists()
    assert _plan(graph, tmp_path / "p.json", "--recency", "0").planner["planner_options"]["recency"] == 0


def test_from_a_plan_for_another_graph_is_an_invalid_plan(graph: Path, tmp_path: Path) -> None:
    """Before: exit 2, `schedule: unknown op id ...`."""
    other = tmp_path / "other.json"
    training_graph(10, seed=7, share_params=6).save(other)
    _plan(other, tmp_path / "p.json")
    r = run("simulate", "--graph", graph, "--from", tmp_path / "p.json")
    assert r.exit_code == 1 and "plan is for graph 'synthetic-10-7'" in r.output, r.output   # rule 0's words
    assert "unknown op id" not in r.output


def test_from_a_plan_for_another_version_of_the_graph_file_is_an_invalid_plan(graph: Path, tmp_path: Path) -> None:
    _plan(graph, tmp_path / "p.json")
    changed = tmp_path / "g2.json"
    changed.write_text(graph.read_text().replace("\n", "\n\n", 1))  # same graph, other bytes: another sha256
    r = run("simulate", "--graph", changed, "--from", tmp_path / "p.json")
    assert r.exit_code == 1 and "another version" in r.output, r.output


def test_from_refuses_to_write_over_the_plan_it_reads(tmp_path) -> None:
    from tests.cli.helpers import foreign_graph_file, run

    path = foreign_graph_file(tmp_path)
    plan = tmp_path / "p.json"
    assert run("simulate", "--graph", path, "--memory", "12MiB", "--out", plan).exit_code == 0
    before = plan.read_bytes()
    r = run("simulate", "--graph", path, "--from", plan, "--out", plan)
    assert r.exit_code == 2 and "is the --from file it reads" in r.output, r.output
    assert plan.read_bytes() == before


def test_from_re_plans_with_the_plans_own_planner_options(graph: Path, tmp_path: Path) -> None:
    """Before: --from re-planned with simulate's default flags (Belady, recency 2), so a plan made otherwise came
    out slower or faster for no reason shown (a frontier point: 8.16 ms as written, 10.13 ms re-simulated)."""
    src = _plan(graph, tmp_path / "p.json", "--victim", "lru", "--recency", "0", "--no-recompute")
    r = run("simulate", "--graph", graph, "--from", tmp_path / "p.json", "--out", tmp_path / "q.json")
    assert r.exit_code == 0, r.output
    q = Plan.load(tmp_path / "q.json")
    assert q.planner["planner_options"] == src.planner["planner_options"]
    assert q.makespan_s == src.makespan_s and q.events == src.events
    assert "re-planned with the plan's own planner options (lru, recency 0," in r.output
    assert f"wrote {tmp_path / 'q.json'}" in r.output
    r = run("simulate", "--graph", graph, "--from", tmp_path / "p.json", "--victim", "belady", "--json")
    assert r.exit_code == 0, r.output
    # a flag replaces its own part only: recency 0 and swap only stay the plan's
    assert "the plan's own planner options but --policy as given (belady, recency 0," in r.output
    assert "swap only" in r.output


def test_a_foreign_planner_record_is_not_trusted() -> None:
    from hybrid.swap.augmented import PlannerOptions

    good = PlannerOptions(victim="lru", recency=0, recompute_ratio=1.0)
    assert PlannerOptions.from_describe(good.describe()) == good
    assert PlannerOptions.from_describe({"victim": "belady", "recompute_ratio": 1}) == PlannerOptions(recompute_ratio=1.0)
    ok = {"victim": "belady"}
    for bad in ({"victim": "random"}, {**ok, "recency": "2"}, {**ok, "recency": -1}, {**ok, "passes": True},
                {**ok, "lookahead": 0}, {**ok, "passes": 10**9}, {**ok, "recency": 2**40},
                {**ok, "recompute_ratio": float("nan")}, ["victim"], None, {},
                {"lb": 1, "swapped_tensors": 3, "rule": "forward activations"}):   # tflms's record before
        assert PlannerOptions.from_describe(bad) is None, bad


def test_from_an_address_planned_plan_re_plans_a_byte_budget_as_its_note_says(graph: Path, tmp_path: Path) -> None:
    """Its recorded options say addresses=True; the re-plan is still the byte budget the note names (it was an
    arena plan again, or infeasible where the byte budget fits)."""
    import json

    src = _plan(graph, tmp_path / "p.json")
    r = run("arena", "--graph", graph, "--plan", tmp_path / "p.json", "--time-limit", "3s",
            "--out", tmp_path / "a.json")
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "a.json").read_text())
    doc["planner"]["planner_options"] = {**src.planner["planner_options"], "addresses": True}
    (tmp_path / "a.json").write_text(json.dumps(doc))
    r = run("simulate", "--graph", graph, "--from", tmp_path / "a.json", "--out", tmp_path / "q.json")
    assert r.exit_code == 0, r.output
    assert "re-planned with a byte budget" in r.output
    assert Plan.load(tmp_path / "q.json").allocation.kind != "arena"


def test_from_a_refined_plan_says_its_timing_is_not_kept(graph: Path, tmp_path: Path) -> None:
    """A new user checked refine's figure with simulate --from and read the swap planner's instead, unsaid."""
    _plan(graph, tmp_path / "s.json")
    r = run("refine", "--graph", graph, "--plan", tmp_path / "s.json", "--out", tmp_path / "r.json",
            "--max-windows", "4", "--seed", "1")
    assert r.exit_code == 0 and "faster" in r.output, r.output
    refined = Plan.load(tmp_path / "r.json")
    r = run("simulate", "--graph", graph, "--from", tmp_path / "r.json")
    assert r.exit_code == 0, r.output
    assert "was re-timed by CP-SAT refinement" in r.output and "that timing is not kept" in r.output
    assert f"{refined.makespan_s * 1e3:.4g} ms" in r.output
