"""A frontier point slower than one with less memory says why: what its own run gave up or left out (a layout
re-planned with less memory, a step its time did not allow), named in its note, before blaming the search."""
from __future__ import annotations

from hybrid.report.frontier import _row, monotone


def test_a_slower_point_points_at_what_its_run_gave_up_before_blaming_the_search() -> None:
    rows = [_row("plan", "optimize", 61 << 20, 0.01046, 0.0035),
            _row("plan", "optimize", 64 << 20, 0.01122, 0.0035,
                 note="left out headroom: not calibrated, 5.07 s left of the time limit", gave_up=True),
            _row("plan", "optimize", 80 << 20, 0.0110, 0.0035, note="interrupted: the best plan found before the stop")]
    monotone(rows)
    at64, at80 = rows[1], rows[2]
    assert at64["note"].startswith("left out headroom") and "what this point's run gave up or left out" in at64["note"]
    assert "did not find as fast a plan" not in at64["note"]
    # a note that explains nothing of the slowness (interrupted, no offsets) does not take the search's place
    assert at80["note"].startswith("interrupted") and "did not find as fast a plan here" in at80["note"]
    assert at64["best_s"] == at80["best_s"] == 0.01046


def test_an_arena_plan_given_as_a_point_sits_at_the_memory_its_arena_needs(tmp_path) -> None:
    """The frontier's axis is the memory a plan may fill: an arena plan needs its arena (and the largest
    workspace beside it), more than its live peak, where it was drawn; a byte budget sits at its peak."""
    from hybrid.graph import Graph
    from hybrid.plan import Plan
    from hybrid.report.frontier import point_row
    from hybrid.validator import event_figures, memory_needed
    from tests.cli.helpers import RESNET, run

    g = Graph.load(RESNET)
    for flags, kind in (((), "arena"), (("--no-arena",), "unconstrained")):
        out = tmp_path / f"{kind}.json"
        r = run("baseline", "--graph", RESNET, "--memory", "64MiB", "--kind", "belady", *flags, "--out", out)
        assert r.exit_code == 0, r.output
        plan = Plan.load(out)
        assert plan.allocation.kind == kind
        row = point_row(out, g, plan.device)
        peak = event_figures(g, plan)["peak_bytes"]
        assert row["usable_bytes"] == memory_needed(g, plan) and row["peak_bytes"] == peak
        if kind == "arena":
            assert row["usable_bytes"] >= plan.allocation.arena_bytes > peak
            assert "needs with the largest workspace" in row["note"]
        else:
            assert row["usable_bytes"] == peak
