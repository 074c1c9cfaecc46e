"""`hybrid arena`: MiniMalloc CSV in and out, and arena offsets for a plan that `hybrid validate` accepts."""
from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from hybrid.arena.lifetimes import plan_buffers
from hybrid.arena.problem import Buffer, Problem, read_csv, write_csv
from hybrid.arena.validate import check_offsets
from hybrid.device import preset
from hybrid.graph.info import unswapped_peak
from hybrid.graph.synthetic import training_graph
from hybrid.plan import Plan
from hybrid.swap.baselines import run_baseline
from tests.cli.helpers import run


def _csv(tmp_path: Path) -> Path:
    rng = np.random.default_rng(5)
    bufs = []
    for k in range(30):
        lo = int(rng.integers(0, 50))
        bufs.append(Buffer(f"b{k}", lo, lo + int(rng.integers(1, 20)), int(rng.integers(1, 64)) * 1024))
    f = tmp_path / "in.csv"
    write_csv(f, Problem(bufs))
    return f


def test_csv_in_offsets_out(tmp_path: Path) -> None:
    f = _csv(tmp_path)
    p, _ = read_csv(f)
    out = tmp_path / "out.csv"
    r = run("arena", "--csv", f, "--time-limit", "20s", "--out", out)
    assert r.exit_code == 0, r.output
    assert "peak live" in r.output and "optimal" in r.output
    q, off = read_csv(out)
    assert off is not None and check_offsets(q, off).valid
    arena = int((off + q.arrays.size).max())
    assert f"({arena} B)" in r.output    # human units, the exact bytes beside
    r2 = run("arena", "--csv", f, "--capacity", str(arena), "--out", tmp_path / "o2.csv")
    assert r2.exit_code == 0, r2.output


def test_capacity_below_the_peak_is_refused_in_one_line(tmp_path: Path) -> None:
    f = _csv(tmp_path)
    p, _ = read_csv(f)
    r = run("arena", "--csv", f, "--capacity", str(p.peak_live() - 1), "--time-limit", "5s")
    assert r.exit_code != 0
    assert "error: no assignment within --capacity" in r.output and "proven" in r.output


def test_plan_gets_arena_offsets_that_validate(tmp_path: Path) -> None:
    g = training_graph(12, seed=4, share_params=6)
    dev = replace(g.device or preset("v100-16gb"), memory_bytes=int(unswapped_peak(g) * 0.5), reserve_bytes=0)
    plan = run_baseline(g, dev, "belady")
    # one offset per tensor (FORMATS) needs more than the byte count: give the layout room to fit
    plan = replace(plan, device=replace(plan.device, memory_bytes=2 * plan.device.memory_bytes))
    gp, pp, out = tmp_path / "g.json", tmp_path / "p.json", tmp_path / "p2.json"
    g.save(gp)
    plan.save(pp)
    r = run("arena", "--graph", gp, "--plan", pp, "--time-limit", "5s", "--out", out)
    assert r.exit_code == 0, r.output
    new = Plan.load(out)
    assert new.allocation.kind == "arena"
    assert json.loads(out.read_text())["allocation"]["arena_bytes"] <= new.device.usable_bytes
    v = run("validate", "--graph", gp, "--plan", out)
    assert v.exit_code == 0 and v.output.startswith("valid"), v.output
    # moving one tensor onto another that is live with it breaks rule 5: the offsets are not decorative
    d = json.loads(out.read_text())
    offs = d["allocation"]["offsets"]
    pb = plan_buffers(g, new)
    prob = pb.problem
    base = np.array([offs[t] for t in pb.tensors])
    a, b = next((i, j) for i in range(len(base)) for j in range(len(base)) if i != j
                and not check_offsets(prob, np.where(np.arange(len(base)) == i, base[j], base)).valid)
    offs[pb.tensors[a]] = offs[pb.tensors[b]]
    out.write_text(json.dumps(d))
    v2 = run("validate", "--graph", gp, "--plan", out)
    assert v2.exit_code == 1 and "rule 5" in v2.output, v2.output


def test_graph_alone_is_planned_statically(tmp_path: Path) -> None:
    g = training_graph(10, seed=2)
    gp, out = tmp_path / "g.json", tmp_path / "offsets.csv"
    g.save(gp)
    r = run("arena", "--graph", gp, "--time-limit", "5s", "--out", out)
    assert r.exit_code == 0, r.output
    q, off = read_csv(out)
    assert off is not None and check_offsets(q, off).valid
    assert len(q) == len(g.tensors)
    # the peak of live bytes here is the graph's unswapped peak less workspace, at the same alignment
    from hybrid.graph.info import unswapped_peak
    assert q.peak_live() <= unswapped_peak(g)
    assert run("arena", "--graph", gp, "--csv", out).exit_code != 0


def test_plan_that_does_not_lay_out_is_replanned_within_the_limit(tmp_path: Path) -> None:
    """A byte-budget plan fills its memory to the brim, so its copies rarely lay out in one arena as planned:
    the command re-plans (a little less memory, or per-size classes), says so, writes a valid plan, exits 0,
    and ends (hang guard only: 30 s for a command of about 2 s, a loaded machine's 5x and margin)."""
    g = training_graph(30, seed=5, share_params=6, skip_prob=0.4)
    dev = replace(g.device or preset("v100-16gb"), memory_bytes=int(unswapped_peak(g) * 0.5), reserve_bytes=0)
    plan = run_baseline(g, dev, "belady")
    gp, pp, out = tmp_path / "g.json", tmp_path / "p.json", tmp_path / "p2.json"
    g.save(gp)
    plan.save(pp)
    t0 = time.perf_counter()
    r = run("arena", "--graph", gp, "--plan", pp, "--time-limit", "2s", "--out", out)
    assert time.perf_counter() - t0 < 30.0
    assert r.exit_code == 0, r.output
    new = Plan.load(out)
    assert new.allocation.kind in ("arena", "size_classes")
    if new.makespan_s != plan.makespan_s:
        assert "re-planned" in r.output or "slower candidate" in r.output, r.output
    v = run("validate", "--graph", gp, "--plan", out)
    assert v.exit_code == 0 and v.output.startswith("valid"), v.output


def test_a_plan_given_as_csv_is_named_in_one_short_line(tmp_path: Path) -> None:
    """A plan file (JSON on one line) was echoed whole as the CSV's header: a 110 KB error (helper-95)."""
    import pytest

    from hybrid.errors import FormatError

    g = training_graph(6)
    plan = run_baseline(g, replace(g.device, memory_bytes=unswapped_peak(g)), "belady")
    f = tmp_path / "p.json"
    plan.save(f)
    with pytest.raises(FormatError, match=r"p\.json: a JSON file, not a MiniMalloc CSV; lay out a plan with "
                                          r"--graph G --plan P") as e:
        read_csv(f)
    assert len(str(e.value)) < 300
    (tmp_path / "w.csv").write_text("x," * 200 + "\n")
    with pytest.raises(FormatError, match=r"header 'x,x,.*\.\.\.' lacks one of id,lower,upper,size"):
        read_csv(tmp_path / "w.csv")
