"""Placement within the GPU's memory: GPU parts' parameters stay resident, so where all-GPU does not fit, parts
move to the CPU; every plan fits and lays out; a graph that fits is placed as before."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.placement.memory import Budget, DoesNotFit, cut
from hybrid.placement.partition import part_graph
from hybrid.placement.schedulers import SCHEDULERS, all_on, exact, greedy, heft, place
from hybrid.placement.timing import evaluate, link_of, to_plan
from hybrid.validator import validate
from tests.cli.helpers import hybrid, run
from tests.placement.random_graphs import random_inference_graph

MiB = 1 << 20


@pytest.fixture(scope="module")
def vgg_small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """VGG16 at batch 1 for a P2200 with 400 MiB: its parameters (528 MiB, 89% in the classifier) do not fit."""
    pytest.importorskip("torch")
    gp = tmp_path_factory.mktemp("vgg") / "vgg_small.json"
    r = hybrid("capture", "--model", "vgg16", "--batch", "1", "--optimizer", "none", "--device", "p2200",
               "--memory", "400MiB", "--out", gp, timeout=120)
    assert r.returncode == 0, r.stderr
    return gp


def test_vgg16_places_the_classifier_on_the_cpu_and_writes_a_plan_that_fits(vgg_small: Path, tmp_path: Path):
    out = tmp_path / "p.json"
    r = run("place", "--graph", vgg_small, "--scheduler", "all", "--cpu", "epyc-2c", "--out", out, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output[r.output.index("{"):])
    mem = doc["memory"]
    assert mem["binds"] and mem["usable_bytes"] == 400 * MiB and mem["all_gpu_bytes"] > 400 * MiB
    rows = {row["scheduler"]: row for row in doc["placements"]}
    assert rows["all-gpu"]["latency_s"] is None and rows["all-gpu"]["status"].startswith("does not fit: needs")
    for name in ("all-cpu", "greedy", "heft", "exact"):
        assert rows[name]["gpu_bytes"] <= 400 * MiB, rows[name]
    assert rows["exact"]["devices"] == "GGGGGC"   # the convolutions on the GPU, the classifier on the host
    assert rows["exact"]["latency_s"] <= rows["greedy"]["latency_s"] + 1e-12
    # proven or not, and why not: "feasible" alone reads as the time limit (it is not, under a memory cap)
    st = rows["exact"]["status"]
    assert st == "optimal" or st.endswith("not proven optimal"), st
    regraph = tmp_path / "p.graph.json"
    plan = Plan.load(out)
    report = validate(Graph.load(regraph), plan)
    assert report.valid and plan.allocation.kind == "arena"
    assert report.peak_bytes == rows["exact"]["gpu_bytes"]


def test_vgg16_text_says_memory_binds_and_all_gpu_alone_is_refused(vgg_small: Path, tmp_path: Path):
    r = run("place", "--graph", vgg_small, "--scheduler", "all")
    assert r.exit_code == 0, r.output
    assert "memory binds: all-gpu needs" in r.output and "of 400 MiB usable; parts placed to fit" in r.output
    assert "GPU mem" in r.output
    out = tmp_path / "gpu.json"
    r = hybrid("place", "--graph", vgg_small, "--scheduler", "all-gpu", "--out", out)
    assert r.returncode != 0 and not out.exists()
    assert "does not fit: needs" in r.stderr and "of 400 MiB usable" in r.stderr


def _with_memory(g: Graph, memory: int) -> Graph:
    return Graph(g.name, g.tensors, g.ops, dataclasses.replace(g.device, memory_bytes=memory), g.extra)


def _bounds(g: Graph) -> tuple[int, int]:
    """(largest single part's need alone on the GPU, all-GPU's need)."""
    pg = part_graph(g, key_only=False)
    link = link_of(g.device)
    single = [evaluate(pg, tuple("gpu" if q == p else "cpu" for q in range(pg.n)), link, "one").gpu_bytes
              for p in range(pg.n)]
    return max(single), all_on(pg, link, "gpu").gpu_bytes


CASES = [(seed, f) for seed in (1, 4, 7, 10) for f in (0.0, 0.5)]


@pytest.mark.parametrize("seed,f", CASES)
def test_every_scheduler_fits_and_its_plan_validates_with_offsets(seed: int, f: float):
    g0 = random_inference_graph(seed, stages=5)
    lo, hi = _bounds(g0)
    assert lo < hi
    g = _with_memory(g0, int(lo + f * (hi - lo)))
    pg = part_graph(g, key_only=False)
    link = link_of(g.device)
    usable = g.device.usable_bytes
    for objective in ("latency", "throughput"):
        got = {}
        for name in SCHEDULERS:
            if name == "heft" and objective == "throughput":
                continue
            if name == "all-gpu":
                with pytest.raises(DoesNotFit):
                    place(pg, link, name, objective, time_limit_s=5)
                continue
            p = place(pg, link, name, objective, time_limit_s=5)
            assert p.gpu_bytes <= usable, (name, objective)
            plan = to_plan(pg, p, g.device, link)
            report = validate(g, plan)
            assert report.valid, (name, objective, report.violations)
            assert plan.allocation.kind == "arena", (name, objective)
            assert report.peak_bytes <= p.gpu_bytes   # equal unless a re-placement for the layout lowered it
            got[name] = p
        key = "latency_s" if objective == "latency" else "period_s"
        assert getattr(got["exact"], key) <= getattr(got["greedy"], key) + 1e-12


@pytest.mark.parametrize("seed", range(6))
def test_gpu_bytes_is_the_validators_peak_and_the_cut_admits_every_placement(seed: int):
    """The need the schedulers count is rule 5's peak exactly, and CP-SAT's linear memory constraint holds for
    every placement at its own need (a relaxation: it never cuts off a placement that fits)."""
    import random

    g = random_inference_graph(seed, stages=5)
    pg = part_graph(g, key_only=False)
    link = link_of(g.device)
    c = cut(pg, Budget.of(g.device))
    rnd = random.Random(seed)
    for _ in range(5):
        devs = tuple(rnd.choice(("cpu", "gpu")) for _ in range(pg.n))
        p = evaluate(pg, devs, link, "random")
        assert validate(g, to_plan(pg, p, g.device, link)).peak_bytes == p.gpu_bytes
        on = {q for q, d in enumerate(devs) if d == "gpu"}
        resident = sum(b for _, b, parts in c.params if on & set(parts))
        assert resident + max((c.act[q] for q in on), default=0) <= p.gpu_bytes


@pytest.mark.parametrize("seed", range(4))
def test_when_memory_does_not_bind_every_scheduler_places_as_without_it(seed: int):
    g = random_inference_graph(seed, stages=4)
    pg = part_graph(g, key_only=False)
    link = link_of(g.device)
    assert all_on(pg, link, "gpu").gpu_bytes <= g.device.usable_bytes
    assert place(pg, link, "greedy") == greedy(pg, link)
    assert place(pg, link, "heft") == heft(pg, link)
    assert place(pg, link, "exact", time_limit_s=5) == exact(pg, link, time_limit_s=5, hint=greedy(pg, link))


def test_a_chain_under_memory_is_placed_by_cp_sat():
    g0 = random_inference_graph(8, stages=5, chain_only=True)
    lo, hi = _bounds(g0)
    g = _with_memory(g0, lo)
    pg = part_graph(g, key_only=False)
    assert pg.is_chain and lo < hi
    p = place(pg, link_of(g.device), "exact", time_limit_s=5)
    assert p.gpu_bytes <= lo and p.extra["method"] != "dynamic programming"


def test_a_memory_no_placement_meets_gives_one_clear_error(tmp_path: Path):
    """A part without CPU times must run on the GPU, and the memory is below every part's need alone."""
    g = random_inference_graph(3, stages=4)
    pg = part_graph(g, key_only=False)
    link = link_of(g.device)
    single = [evaluate(pg, tuple("gpu" if q == p else "cpu" for q in range(pg.n)), link, "one").gpu_bytes
              for p in range(pg.n)]
    d = g.to_json()
    d["ops"][-1].pop("cpu_time_s")
    d["device"]["memory_bytes"] = min(single) - 512
    small = Graph.from_json(d)
    for name in ("greedy", "heft", "exact"):
        with pytest.raises(DoesNotFit, match="no placement fits the GPU's memory"):
            place(part_graph(small, key_only=False), link, name, time_limit_s=5)
    gp = tmp_path / "g.json"
    small.save(gp)
    r = run("place", "--graph", gp, "--scheduler", "all", "--out", tmp_path / "p.json")
    assert r.exit_code != 0
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: no placement fits the GPU's memory: needs"), r.output
    assert "lack cpu_time_s" in lines[0] and not (tmp_path / "p.json").exists()


def test_memory_flag_binds_a_graph_captured_for_the_whole_card(vgg_small: Path, tmp_path: Path):
    """--memory says what the GPU's copies may fill, as in the planners: no capture at another memory needed."""
    d = json.loads(Path(vgg_small).read_text())
    d["device"]["memory_bytes"] = 5 << 30          # the card whole: all-GPU fits
    whole = tmp_path / "whole.json"
    whole.write_text(json.dumps(d))
    r = run("place", "--graph", whole, "--scheduler", "exact", "--cpu", "epyc-2c", "--json")
    assert r.exit_code == 0 and not json.loads(r.output[r.output.index("{"):])["memory"]["binds"], r.output
    r = run("place", "--graph", whole, "--scheduler", "exact", "--cpu", "epyc-2c", "--memory", "400MiB", "--json")
    doc = json.loads(r.output[r.output.index("{"):])
    assert r.exit_code == 0 and doc["memory"]["binds"] and doc["memory"]["usable_bytes"] == 400 * MiB
    assert doc["placements"][0]["devices"] == "GGGGGC"


def test_a_placement_shaped_by_memory_says_so(vgg_small: Path) -> None:
    """`place` marks what memory shaped (the CLI reads that rather than deciding it again); unmarked otherwise."""
    g = Graph.load(vgg_small)
    pg = part_graph(g)
    link = link_of(g.device)
    assert place(pg, link, "greedy").extra.get("memory_binds") is True
    roomy = dataclasses.replace(g.device, memory_bytes=5 << 30)
    assert not place(pg, link, "greedy", device=roomy).extra.get("memory_binds")


@pytest.mark.parametrize("seed", (1, 4, 7))
def test_repair_past_its_deadline_fits_with_one_evaluation_a_move(seed: int, monkeypatch) -> None:
    """`repair` weighs every GPU part afresh for each move (Inception-v4-4 at --parts fine: 3,100 evaluations, 12 s
    past a 5 s limit). Past its deadline it moves parts in the order of its first weighing, one evaluation a move:
    the placement still fits; within the deadline it is the weighing repair's, move for move."""
    import time

    import hybrid.placement.memory as memory

    g0 = random_inference_graph(seed, stages=8)
    lo, hi = _bounds(g0)
    g = _with_memory(g0, lo + (hi - lo) // 10)
    pg = part_graph(g, key_only=False)
    link = link_of(g.device)
    budget = Budget.of(g.device)
    start = all_on(pg, link, "gpu")
    assert not budget.fits(start)
    calls = [0]
    real = memory.evaluate

    def counted(*a, **k):  # noqa: ANN002, ANN003, ANN202
        calls[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(memory, "evaluate", counted)
    timely = memory.repair(pg, start, link, budget)
    weighed = calls[0]
    calls[0] = 0
    late = memory.repair(pg, start, link, budget, deadline=time.monotonic() - 1.0)
    movable_parts = sum(memory.movable(pg))
    assert budget.fits(timely) and budget.fits(late)
    assert calls[0] <= 2 * movable_parts + 1 and calls[0] <= weighed
    assert memory.repair(pg, start, link, budget, deadline=time.monotonic() + 600).devices == timely.devices
    calls[0] = 0
    monkeypatch.setattr(memory, "received", lambda: True)   # a Ctrl-C / SIGTERM: as past the deadline
    stopped = memory.repair(pg, start, link, budget)
    assert budget.fits(stopped) and calls[0] <= 2 * movable_parts + 1 and calls[0] <= weighed
