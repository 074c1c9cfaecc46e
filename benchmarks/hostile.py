"""Hostile inputs (issue 30's categories): each case named, its expected outcome, and what the CLI did.

    PYTHONPATH=. python -m benchmarks.hostile          # a table of every case, then the counts

Every case runs `hybrid ...` in this process (click's CliRunner, a few seconds in all) on small files made in a
temporary folder: flags out of range or not finite, graph and plan fields set to NaN/Infinity/1e400/huge/
negative/wrong types, deeply nested JSON, a plan's events deleted, duplicated or retimed, commands given a broken
or recomputing plan to write from, an arena CSV with a duplicate id. The counts the issue asks to be 0:
tracebacks, corrupted plans accepted (`validate` exit 0 on a plan that breaks the rules or a field's range),
invalid plans written with exit 0 (any command exiting 0 whose output plan `validate` rejects). Besides them,
`unexpected` counts cases whose exit status differs from the expected one. tests/cli/test_hostile.py asserts
all four are 0.
"""
from __future__ import annotations

import copy
import json
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from click.testing import CliRunner

# expected outcomes: the exit statuses that count as the right answer
OK, INVALID, REFUSED = "ok (0)", "invalid (1)", "refused (2)"
REJECTED = "rejected (1 or 2)"
STATUSES = {OK: {0}, INVALID: {1}, REFUSED: {2}, REJECTED: {1, 2}}


@dataclass
class Case:
    name: str
    category: str
    expect: str
    args: Callable[["Files"], list[str]]
    out: str | None = None          # the plan file the command writes, relative to the folder


@dataclass
class Outcome:
    case: Case
    exit_code: int
    traceback: bool
    first_line: str
    corrupted_accepted: bool = False
    invalid_written: bool = False

    @property
    def as_expected(self) -> bool:
        return not self.traceback and self.exit_code in STATUSES[self.case.expect]


@dataclass
class Files:
    """The small valid files every case starts from, in `root`."""

    root: Path
    graph: dict[str, Any] = field(default_factory=dict)
    plan: dict[str, Any] = field(default_factory=dict)

    def path(self, name: str) -> str:
        return str(self.root / name)

    def write(self, name: str, doc: Any) -> str:
        """`doc` as JSON, NaN and Infinity written as Python writes them (what a hostile file holds)."""
        (self.root / name).write_text(json.dumps(doc))
        return self.path(name)

    def write_bytes(self, name: str, data: bytes) -> str:
        (self.root / name).write_bytes(data)
        return self.path(name)

    def write_text(self, name: str, text: str) -> str:
        (self.root / name).write_text(text)
        return self.path(name)


def make_files(root: Path) -> Files:
    from hybrid.graph import Graph
    from hybrid.graph.info import unswapped_peak
    from hybrid.graph.synthetic import training_graph
    from hybrid.swap.baselines import run_baseline
    from hybrid.validator import validate

    f = Files(root)
    g = training_graph(8, seed=1)
    g.save(root / "g.json")
    dev = replace(g.device, memory_bytes=14 << 20, reserve_bytes=0)
    plan = run_baseline(g, dev, "belady")
    plan.save(root / "p.json")
    run_baseline(g, replace(dev, memory_bytes=40 << 20), "belady").save(root / "pa.json")  # room for an arena
    # one free moved to 1e8 s with makespan_s to match (still a valid plan), then every copy made zero-length:
    # a tolerance taken from the plan's own makespan (0.1 s here) would let that pass
    for i, e in enumerate(plan.events):
        if e.kind == "free":
            padded = replace(plan, events=[*plan.events[:i], replace(e, start_s=1e8, end_s=1e8),
                                           *plan.events[i + 1:]], makespan_s=1e8)
            if validate(g, padded).valid:
                zero = [replace(x, end_s=x.start_s) if x.kind in ("swap_in", "swap_out") else x
                        for x in padded.events]
                replace(padded, events=zero).save(root / "padded.json")
                break
    else:
        raise AssertionError("no free event of the plan could be moved to the end")
    f.graph = json.loads((root / "g.json").read_text())
    f.plan = json.loads((root / "p.json").read_text())
    nodev = dict(f.graph)
    nodev.pop("device")
    f.write("nodev.json", nodev)
    # its forward pass alone, an inference graph (what `hybrid place` takes), without a device block either
    fwd = [o for o in nodev["ops"] if o["kind"] == "forward"]
    used = {t for o in fwd for t in (*o["inputs"], *o["outputs"])}
    f.write("nodev_inference.json", {**nodev, "ops": fwd, "tensors": [t for t in nodev["tensors"] if t["id"] in used]})
    # a plan that recomputes: cheap forward ops, slow copies (tests/hybrid/test_recompute.py's graph)
    g2 = training_graph(24, seed=5)
    g2 = Graph(g2.name, g2.tensors, [replace(o, time_s=o.time_s * 0.01) if o.id.startswith("fwd") else o
                                     for o in g2.ops], g2.device)
    g2.save(root / "rg.json")
    dev2 = replace(g2.device, memory_bytes=unswapped_peak(g2) // 2, reserve_bytes=0)
    run_baseline(g2, dev2, "belady", recompute=True).save(root / "rp.json")
    (root / "c.csv").write_text("id,lower,upper,size\na,0,3,100\nb,2,5,50\nc,4,8,70\n")
    return f


def _set(doc: dict, path: tuple, value: Any) -> dict:
    """A deep copy of `doc` with the field at `path` (keys and list indices) set to `value`, or deleted when
    `value` is DELETE."""
    out = copy.deepcopy(doc)
    cur = out
    for k in path[:-1]:
        cur = cur[k]
    if value is DELETE:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return out


DELETE = object()
NAN, INF = float("nan"), float("inf")


def _first(doc: dict, kind: str) -> int:
    return next(i for i, e in enumerate(doc["events"]) if e["kind"] == kind)


def cases() -> list[Case]:
    out: list[Case] = []

    def add(name: str, category: str, expect: str, args: Callable[[Files], list[str]], out_: str | None = None):
        out.append(Case(name, category, expect, args, out_))

    # ---- flags ------------------------------------------------------------------------------------------
    for flag, value in (("--memory", "1e400GiB"), ("--memory", "1e30"), ("--memory", "0"), ("--alignment", "1e400"),
                        ("--alignment", "3"), ("--alignment", "4TiB"), ("--reserve", "1e400"), ("--h2d", "1e400GB/s"),
                        ("--h2d", "0.001B/s"), ("--d2h", "1e30TB/s"), ("--latency", "1e400s"),
                        ("--latency", "1000000000000s"), ("--latency", "nan")):
        add(f"info {flag} {value}", "flags", REFUSED,
            lambda f, flag=flag, value=value: ["info", "--graph", f.path("g.json"), flag, value])
    add("simulate --memory 1e30", "flags", REFUSED,
        lambda f: ["simulate", "--graph", f.path("g.json"), "--memory", "1e30", "--out", f.path("s.json")], "s.json")
    for flag, value in (("--alignment", "1e400"), ("--alignment", "1PiB"), ("--capacity", "1e400"),
                        ("--time-limit", "1e400s"), ("--time-limit", "99999999999h")):
        add(f"arena --csv {flag} {value}", "flags", REFUSED,
            lambda f, flag=flag, value=value: ["arena", "--csv", f.path("c.csv"), flag, value])
    add("refine --time-limit 1e400s", "flags", REFUSED,
        lambda f: ["refine", "--graph", f.path("g.json"), "--plan", f.path("p.json"), "--time-limit", "1e400s",
                   "--out", f.path("r.json")], "r.json")

    # ---- graph fields -----------------------------------------------------------------------------------
    graph_fields = {
        ("tensors", 0, "bytes"): [NAN, INF, -INF, 1e30, 10**30, 10**400, -1, 1.5, "12", True, None, DELETE],
        ("ops", 0, "time_s"): [NAN, INF, -1.0, 1e30, "1", None],
        ("ops", 0, "workspace_bytes"): [INF, 1e30, -5, 0.5],
        ("ops", 0, "cpu_time_s"): [NAN, INF, -1.0],
        ("device", "memory_bytes"): [INF, NAN, 1e30, 0, -1, "16GiB", 1.5],
        ("device", "h2d_bytes_per_s"): [NAN, INF, 0, -1e9, 1e-30, "12GB/s"],
        ("device", "transfer_latency_s"): [NAN, INF, -1e-6, 1e30],
        ("device", "alignment_bytes"): [3, 0, INF, 2**40],
        ("device", "reserve_bytes"): [NAN, -1, 2**40],
        ("name",): [5],
        ("tensors",): [{"a": 1}],
        ("ops", 0): ["op"],
    }
    for path, values in graph_fields.items():
        for v in values:
            label = "deleted" if v is DELETE else f"10**{len(str(v)) - 1}" if isinstance(v, int) and v > 10**20 \
                else repr(v)
            name = "graph " + ".".join(map(str, path)) + f" = {label}"
            add(f"info: {name}", "graph fields", REFUSED,
                lambda f, path=path, v=v: ["info", "--graph", f.write("bad_g.json", _set(f.graph, path, v))])
    add("info: graph bytes 1e400 (overflows to inf)", "graph fields", REFUSED,
        lambda f: ["info", "--graph", f.write_text("bad_g.json", json.dumps(f.graph).replace(
            '"bytes": ' + str(f.graph["tensors"][0]["bytes"]), '"bytes": 1e400', 1))])
    for what, path, v in (("transfer_latency_s NaN", ("device", "transfer_latency_s"), NAN),
                          ("h2d_bytes_per_s Infinity", ("device", "h2d_bytes_per_s"), INF),
                          ("memory_bytes Infinity", ("device", "memory_bytes"), INF)):
        add(f"simulate: graph device {what}", "graph fields", REFUSED,
            lambda f, path=path, v=v: ["simulate", "--graph", f.write("bad_g.json", _set(f.graph, path, v)),
                                       "--memory", "14MiB", "--out", f.path("s.json")], "s.json")
    add("info: graph nested 100000 deep", "graph fields", REFUSED,
        lambda f: ["info", "--graph", f.write_text("deep.json", "[" * 100_000 + "]" * 100_000)])
    add("info: graph nested 100000 deep in a field", "graph fields", REFUSED,
        lambda f: ["info", "--graph", f.write_text("deep.json", json.dumps(f.graph)[:-1] + ', "x": '
                                                   + "[" * 100_000 + "]" * 100_000 + "}")])
    add("info: graph not UTF-8", "graph fields", REFUSED,
        lambda f: ["info", "--graph", f.write_bytes("bin.json", b'{"format": "\xff\xfe"}')])

    # ---- plan fields: validate must never say valid -------------------------------------------------------
    def zero_copies_nan_latency(f: Files) -> dict:
        """issue 30's fooling case: every copy takes no time and the latency is NaN."""
        d = _set(f.plan, ("device", "transfer_latency_s"), NAN)
        for e in d["events"]:
            if e["kind"] in ("swap_in", "swap_out"):
                e["end_s"] = e["start_s"]
        d["makespan_s"] = max(e.get("end_s", e.get("at_s", 0.0)) for e in d["events"])
        return d

    plan_docs: dict[str, Callable[[Files], Any]] = {
        "device.transfer_latency_s NaN, every copy zero-length": zero_copies_nan_latency,
        "device.transfer_latency_s Infinity": lambda f: _set(f.plan, ("device", "transfer_latency_s"), INF),
        "device.h2d_bytes_per_s NaN": lambda f: _set(f.plan, ("device", "h2d_bytes_per_s"), NAN),
        "device.memory_bytes Infinity": lambda f: _set(f.plan, ("device", "memory_bytes"), INF),
        "device.memory_bytes 1e30": lambda f: _set(f.plan, ("device", "memory_bytes"), 1e30),
        "device.alignment_bytes 3": lambda f: _set(f.plan, ("device", "alignment_bytes"), 3),
        'planner "ga"': lambda f: _set(f.plan, ("planner",), "ga"),
        "metrics [1]": lambda f: _set(f.plan, ("metrics",), [1]),
        'metrics.ideal_s "x"': lambda f: _set(f.plan, ("metrics", "ideal_s"), "x"),
        "metrics.ideal_s NaN": lambda f: _set(f.plan, ("metrics", "ideal_s"), NAN),
        "metrics.peak_bytes Infinity": lambda f: _set(f.plan, ("metrics", "peak_bytes"), INF),
        "makespan_s NaN": lambda f: _set(f.plan, ("makespan_s",), NAN),
        "makespan_s halved": lambda f: _set(f.plan, ("makespan_s",), f.plan["makespan_s"] / 2),
        'makespan_s "1"': lambda f: _set(f.plan, ("makespan_s",), "1"),
        "events[0].start_s NaN": lambda f: _set(f.plan, ("events", 0, "start_s"), NAN),
        "events[0].end_s Infinity": lambda f: _set(f.plan, ("events", 0, "end_s"), INF),
        "events[0].end_s 10**400": lambda f: _set(f.plan, ("events", 0, "end_s"), 10**400),
        "makespan_s -10**400": lambda f: _set(f.plan, ("makespan_s",), -10**400),
        "device.memory_bytes 10**400": lambda f: _set(f.plan, ("device", "memory_bytes"), 10**400),
        'events[0].start_s "0"': lambda f: _set(f.plan, ("events", 0, "start_s"), "0"),
        "first compute's recompute \"false\"": lambda f: _set(f.plan, ("events", _first(f.plan, "compute"),
                                                                       "recompute"), "false"),
        "first free's at_s NaN": lambda f: _set(f.plan, ("events", _first(f.plan, "free"), "at_s"), NAN),
        "first swap_in's end_s halved": lambda f: _set(f.plan, ("events", _first(f.plan, "swap_in"), "end_s"),
                                                       f.plan["events"][_first(f.plan, "swap_in")]["end_s"] / 2),
        "first compute 1 ms late": lambda f: _set(f.plan, ("events", _first(f.plan, "compute"), "start_s"),
                                                  f.plan["events"][_first(f.plan, "compute")]["start_s"] + 1e-3),
        "first swap_in deleted": lambda f: _set(f.plan, ("events", _first(f.plan, "swap_in")), DELETE),
        "first compute deleted": lambda f: _set(f.plan, ("events", _first(f.plan, "compute")), DELETE),
        "first free deleted": lambda f: _set(f.plan, ("events", _first(f.plan, "free")), DELETE),
        "first swap_in duplicated": lambda f: {**f.plan, "events": f.plan["events"]
                                               + [f.plan["events"][_first(f.plan, "swap_in")]]},
        "first compute duplicated": lambda f: {**f.plan, "events": f.plan["events"]
                                               + [f.plan["events"][_first(f.plan, "compute")]]},
        "schedule 5": lambda f: _set(f.plan, ("schedule",), 5),
        "allocation.classes[0].bytes 1e30": lambda f: (
            _set(f.plan, ("allocation", "classes", 0, "bytes"), 1e30) if f.plan["allocation"]["kind"] == "size_classes"
            else _set(f.plan, ("allocation",), {"kind": "arena", "arena_bytes": 1e30, "offsets": {}})),
        "allocation.kind arena, offsets 1e400": lambda f: _set(f.plan, ("allocation",), {
            "kind": "arena", "arena_bytes": 1 << 20, "offsets": {f.graph["tensors"][0]["id"]: INF}}),
        "format hybrid-graph/1": lambda f: _set(f.plan, ("format",), "hybrid-graph/1"),
    }
    for what, make in plan_docs.items():
        add(f"validate: plan {what}", "plan fields", REJECTED,
            lambda f, make=make: ["validate", "--graph", f.path("g.json"), "--plan", f.write("bad_p.json", make(f))])
    add("validate: plan nested 100000 deep", "plan fields", REJECTED,
        lambda f: ["validate", "--graph", f.path("g.json"), "--plan",
                   f.write_text("deep.json", "{\"a\":" * 100_000 + "1" + "}" * 100_000)])
    add("validate: plan padded to end at 1e8 s, every copy zero-length", "plan fields", REJECTED,
        lambda f: ["validate", "--graph", f.path("g.json"), "--plan", f.path("padded.json")])
    add("validate: the plan as made", "plan fields", OK,
        lambda f: ["validate", "--graph", f.path("g.json"), "--plan", f.path("p.json")])

    # ---- commands that write plans ----------------------------------------------------------------------
    def broken(f: Files) -> str:
        return f.write("broken.json", _set(f.plan, ("events", _first(f.plan, "swap_in")), DELETE))

    add("arena --graph G --plan BROKEN --out", "plans written", INVALID,
        lambda f: ["arena", "--graph", f.path("g.json"), "--plan", broken(f), "--time-limit", "2s",
                   "--out", f.path("a.json")], "a.json")
    add("arena --graph G --plan P --out", "plans written", OK,
        lambda f: ["arena", "--graph", f.path("g.json"), "--plan", f.path("pa.json"), "--time-limit", "2s",
                   "--out", f.path("a.json")], "a.json")
    add("refine --plan BROKEN", "plans written", INVALID,
        lambda f: ["refine", "--graph", f.path("g.json"), "--plan", broken(f), "--time-limit", "3s",
                   "--out", f.path("r.json")], "r.json")
    add("refine --plan RECOMPUTING (reruns keep their places)", "plans written", OK,
        lambda f: ["refine", "--graph", f.path("rg.json"), "--plan", f.path("rp.json"), "--time-limit", "3s",
                   "--out", f.path("r.json")], "r.json")
    add("refine --plan P --max-windows 1", "plans written", OK,
        lambda f: ["refine", "--graph", f.path("g.json"), "--plan", f.path("p.json"), "--time-limit", "3s",
                   "--max-windows", "1", "--quiet", "--out", f.path("r.json")], "r.json")
    add("place on a training graph", "plans written", REFUSED,
        lambda f: ["place", "--graph", f.path("nodev.json"), "--time-limit", "2s", "--out", f.path("pl.json")])
    add("place on an inference graph without a device block", "plans written", OK,
        lambda f: ["place", "--graph", f.path("nodev_inference.json"), "--time-limit", "2s", "--out",
                   f.path("pl.json")], "pl.json")

    # ---- arena CSV --------------------------------------------------------------------------------------
    for what, text in (("a duplicate id", "id,lower,upper,size\na,0,3,100\na,2,5,50\n"),
                       ("size 10**30", f"id,lower,upper,size\na,0,3,{10**30}\n"),
                       ("upper 10**30", f"id,lower,upper,size\na,0,{10**30},8\n"),
                       ("size NaN", "id,lower,upper,size\na,0,3,nan\n")):
        add(f"arena --csv with {what}", "arena csv", REFUSED,
            lambda f, text=text: ["arena", "--csv", f.write_text("bad.csv", text)])
    return out


def run_case(files: Files, case: Case) -> Outcome:
    from hybrid.cli.main import cli
    from hybrid.graph import Graph
    from hybrid.plan import Plan
    from hybrid.validator import validate

    if case.out:
        (files.root / case.out).unlink(missing_ok=True)
    args = case.args(files)
    res = CliRunner().invoke(cli, args, catch_exceptions=True)
    tb = res.exception is not None and not isinstance(res.exception, SystemExit)
    text = res.output.strip().splitlines()
    first = next((ln for ln in text if ln.startswith(("error:", "invalid:", "valid:"))), text[-1] if text else "")
    if tb:
        first = f"{type(res.exception).__name__}: {res.exception}"[:200]
    oc = Outcome(case, res.exit_code, tb or "Traceback" in res.output, first)
    if case.category == "plan fields" and case.expect != OK and res.exit_code == 0:
        oc.corrupted_accepted = True
    out = files.root / case.out if case.out else None
    if out is not None and out.exists() and res.exit_code == 0:
        gpath = args[args.index("--graph") + 1]
        try:
            oc.invalid_written = not validate(Graph.load(gpath), Plan.load(out)).valid
        except Exception:  # noqa: BLE001 - an unreadable plan is an invalid one
            oc.invalid_written = True
    return oc


def event_edits(files: Files) -> tuple[int, int]:
    """Every event of the plan deleted, and duplicated, one at a time: (edits tried, edits accepted)."""
    from hybrid.graph import Graph
    from hybrid.plan import Plan
    from hybrid.validator import validate

    g = Graph.load(files.root / "g.json")
    plan = Plan.load(files.root / "p.json")
    tried = accepted = 0
    for i in range(len(plan.events)):
        for events in (plan.events[:i] + plan.events[i + 1:], plan.events[:i + 1] + plan.events[i:]):
            tried += 1
            accepted += validate(g, replace(plan, events=events)).valid
    return tried, accepted


def run_all(root: Path | None = None) -> tuple[list[Outcome], tuple[int, int]]:
    with tempfile.TemporaryDirectory() as tmp:
        files = make_files(Path(root or tmp))
        return [run_case(files, c) for c in cases()], event_edits(files)


def counts(outcomes: list[Outcome], edits: tuple[int, int]) -> dict[str, int]:
    return {"cases": len(outcomes), "tracebacks": sum(o.traceback for o in outcomes),
            "corrupted plans accepted": sum(o.corrupted_accepted for o in outcomes) + edits[1],
            "invalid plans written with exit 0": sum(o.invalid_written for o in outcomes),
            "unexpected exit status": sum(not o.as_expected for o in outcomes),
            "event deletions/duplications tried": edits[0], "of them accepted": edits[1]}


def main() -> int:
    outcomes, edits = run_all()
    width = max(len(o.case.name) for o in outcomes)
    for o in outcomes:
        mark = "  " if o.as_expected and not o.invalid_written else "!!"
        print(f"{mark} {o.case.name:<{width}}  expect {o.case.expect:<17} got {o.exit_code}  {o.first_line[:110]}")
    c = counts(outcomes, edits)
    print()
    for k, v in c.items():
        print(f"{k:<36} {v}")
    bad = c["tracebacks"] + c["corrupted plans accepted"] + c["invalid plans written with exit 0"]
    return 1 if bad or c["unexpected exit status"] else 0


if __name__ == "__main__":
    sys.exit(main())
