"""Property-based fuzzing of plan and graph files (issue 30, Deliver 1).

Fields of a valid plan and of its graph are mutated — numbers to NaN, infinities, negatives, huge values or
nearby values, types swapped, keys deleted, events deleted, duplicated or retimed — and written as a hostile
file would hold them. Then:

- reading and validating never raises anything but HybridError, and `hybrid validate` / `hybrid info` (run
  in this process) exit 0, 1 or 2 without a traceback;
- whenever the validator accepts a mutated plan, an independent recomputation from the graph and the plan's
  device agrees with every figure the plan states: each event's duration, each op run once, makespan_s and
  metrics.ideal_s, every device figure finite and in range, and the plan writes as strict JSON.

Examples are derandomized (the same few hundred every run), so CI is stable.
"""
from __future__ import annotations

import copy
import json
import math
from dataclasses import replace
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid.cli.main import cli
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.graph.synthetic import training_graph
from hybrid.jsonio import loads_strict
from hybrid.plan import Plan
from hybrid.swap.baselines import run_baseline
from hybrid.validator import validate

SETTINGS = settings(max_examples=150, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

GRAPH = training_graph(5, seed=3)
GRAPH_DOC = json.loads(GRAPH.dumps())
PLAN = run_baseline(GRAPH, replace(GRAPH.device, memory_bytes=14 << 20, reserve_bytes=0), "belady")
PLAN_DOC = json.loads(PLAN.dumps())

HOSTILE = [math.nan, math.inf, -math.inf, -1, -1e-3, 0, 1e-300, 1.5, 1e30, 10**30, 2**63, 10**400, "1", "", None, True,
           False, [], {}, [1], {"a": 1}]


def _leaves(doc: Any, path: tuple = ()) -> list[tuple]:
    """Paths (keys and indices) to every value of a JSON document, containers included (not the root)."""
    out = [path] if path else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _leaves(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _leaves(v, path + (i,))
    return out


PLAN_PATHS = _leaves(PLAN_DOC)
GRAPH_PATHS = _leaves(GRAPH_DOC)


def _get(doc: Any, path: tuple) -> Any:
    for k in path:
        doc = doc[k]
    return doc


def _nearby(v: Any) -> list[Any]:
    """Values a careless edit would leave: close to the original, of the same type."""
    if isinstance(v, bool):
        return [not v]
    if isinstance(v, int) and abs(v) > 2**60:   # beyond float range: integer edits only
        return [v * 2, v + 1, -v]
    if isinstance(v, (int, float)):
        return [v * 2, v / 2, v + 1, v - 1e-6, -v, v * (1 + 1e-12)]
    if isinstance(v, str):
        return [v + "x", v.upper(), ""]
    return []


@st.composite
def mutations(draw, doc: dict, paths: list[tuple], events: bool) -> tuple[dict, list[str]]:
    """A copy of `doc` with 1-3 edits, and what they were (for the failure message)."""
    out = copy.deepcopy(doc)
    what = []
    for _ in range(draw(st.integers(1, 3))):
        ops = ["set", "near", "delete"] + (["event_delete", "event_duplicate", "event_retime", "event_field",
                                            "event_field", "device_field"] if events else [])
        op = draw(st.sampled_from(ops))
        if op in ("event_field", "device_field"):   # the figures the validator recomputes, edited often
            if op == "device_field":
                path = ("device", draw(st.sampled_from(sorted(out["device"]))))
            elif out["events"]:
                i = draw(st.integers(0, len(out["events"]) - 1))
                path = ("events", i, draw(st.sampled_from(sorted(out["events"][i]))))
            else:
                continue
            old = _get(out, path)
            new = draw(st.sampled_from(_nearby(old) + HOSTILE[:8]))
            _get(out, path[:-1])[path[-1]] = new
            what.append(f"{path} = {new!r}")
            continue
        if op.startswith("event_"):
            ev = out["events"]
            if not ev:
                continue
            i = draw(st.integers(0, len(ev) - 1))
            if op == "event_delete":
                del ev[i]
            elif op == "event_duplicate":
                ev.insert(draw(st.integers(0, len(ev))), copy.deepcopy(ev[i]))
            else:
                dt = draw(st.sampled_from([1e-3, -1e-3, 1e-7, 1e-12, -1e-12, math.nan, 1e300]))
                for key in ("start_s", "end_s", "at_s"):
                    if isinstance(ev[i].get(key), (int, float)):
                        ev[i][key] += dt
            what.append(f"{op} events[{i}]")
            continue
        path = draw(st.sampled_from(paths))
        try:
            parent, old = _get(out, path[:-1]), _get(out, path)
        except (KeyError, IndexError, TypeError):
            continue   # an earlier edit removed it
        if op == "delete":
            del parent[path[-1]]
            what.append(f"delete {path}")
            continue
        choices = HOSTILE if op == "set" else _nearby(old)
        if not choices:
            continue
        new = draw(st.sampled_from(choices))
        parent[path[-1]] = copy.deepcopy(new)
        what.append(f"{path} = {new!r}")
    return out, what


def _file_text(doc: dict) -> str:
    """What a hostile file holds: Python's JSON, NaN and Infinity included."""
    return json.dumps(doc)


def _recomputation_agrees(g: Graph, plan: Plan) -> None:
    """An independent recomputation of the figures a valid plan states, from the graph and the device."""
    dev = plan.device
    for key in ("memory_bytes", "h2d_bytes_per_s", "d2h_bytes_per_s", "transfer_latency_s", "alignment_bytes",
                "reserve_bytes"):
        v = getattr(dev, key)
        assert isinstance(v, (int, float)) and math.isfinite(v) and v >= 0, (key, v)
    assert dev.memory_bytes > dev.reserve_bytes and dev.h2d_bytes_per_s > 0 and dev.d2h_bytes_per_s > 0
    tol = 1e-9 * max(1.0, plan.makespan_s)
    runs: dict[str, int] = {}
    ideal = 0.0
    last = 0.0
    for e in plan.events:
        assert math.isfinite(e.start_s) and math.isfinite(e.end_s) and e.start_s >= -tol
        last = max(last, e.end_s)
        if e.kind == "compute":
            op = g.op(e.op)
            if e.on_cpu:
                want = op.cpu_time_s
            else:
                im = next((x for x in op.implementations if x.name == e.impl), None) if e.impl else None
                want = im.time_s if im is not None else op.implementations[op.default_impl].time_s
            assert abs((e.end_s - e.start_s) - want) <= tol, (e, want)
            if not e.recompute:
                runs[e.op] = runs.get(e.op, 0) + 1
                ideal += want
        elif e.kind in ("swap_in", "swap_out"):
            bw = dev.h2d_bytes_per_s if e.kind == "swap_in" else dev.d2h_bytes_per_s
            want = g.tensor(e.tensor).bytes / bw + dev.transfer_latency_s
            assert abs((e.end_s - e.start_s) - want) <= tol, (e, want)
        else:
            assert e.start_s == e.end_s
    assert runs == {o.id: 1 for o in g.ops}
    assert abs(plan.makespan_s - last) <= tol
    assert abs(plan.metrics["ideal_s"] - ideal) <= 1e-9 * max(1.0, ideal)
    plan.dumps()   # writes as strict JSON


def _load_and_validate(g: Graph, text: str) -> None:
    try:
        plan = Plan.from_json(loads_strict(text, "plan"), "plan")
        report = validate(g, plan)
    except HybridError:
        return
    if report.valid:
        _recomputation_agrees(g, plan)


def _cli(args: list[str]) -> None:
    res = CliRunner().invoke(cli, args, catch_exceptions=True)
    assert res.exception is None or isinstance(res.exception, SystemExit), \
        f"{type(res.exception).__name__}: {res.exception}"
    assert res.exit_code in (0, 1, 2) and "Traceback" not in res.output, res.output


def test_the_unmutated_files_are_valid():
    assert validate(GRAPH, PLAN).valid
    _recomputation_agrees(GRAPH, PLAN)
    assert any(e.kind == "swap_in" for e in PLAN.events)   # the plan swaps: copies' durations are checked too


@SETTINGS
@given(mutations(PLAN_DOC, PLAN_PATHS, events=True))
def test_a_mutated_plan_is_refused_or_its_figures_recompute(mutated):
    doc, what = mutated
    _load_and_validate(GRAPH, _file_text(doc))


@SETTINGS
@given(mutations(GRAPH_DOC, GRAPH_PATHS, events=False))
def test_a_mutated_graph_is_refused_or_read_and_its_plan_judged(mutated):
    doc, what = mutated
    try:
        g = Graph.from_json(loads_strict(_file_text(doc), "graph"), "graph")
    except HybridError:
        return
    for t in g.tensors:
        assert math.isfinite(t.bytes) and 0 <= t.bytes
    for o in g.ops:
        assert all(math.isfinite(im.time_s) and im.time_s >= 0 for im in o.implementations)
    # the plan made for the unmutated graph: rule 0 (another sha256) or an independent agreement
    _load_and_validate(g, PLAN.dumps())


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    (root / "g.json").write_text(GRAPH.dumps())
    (root / "p.json").write_text(PLAN.dumps())
    return root


@settings(SETTINGS, max_examples=60)
@given(plan=mutations(PLAN_DOC, PLAN_PATHS, events=True), graph=mutations(GRAPH_DOC, GRAPH_PATHS, events=False),
       which=st.sampled_from(["plan", "graph", "both"]))
def test_the_command_line_never_shows_a_traceback(files, plan, graph, which):
    gpath, ppath = files / "g.json", files / "p.json"
    if which in ("graph", "both"):
        gpath = files / "g_fuzz.json"
        gpath.write_text(_file_text(graph[0]))
    if which in ("plan", "both"):
        ppath = files / "p_fuzz.json"
        ppath.write_text(_file_text(plan[0]))
    _cli(["validate", "--graph", str(gpath), "--plan", str(ppath)])
    if which != "plan":
        _cli(["info", "--graph", str(gpath)])
