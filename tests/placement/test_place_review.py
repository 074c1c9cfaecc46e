"""`hybrid place` after a new user's review: a line (and --json's costs) naming the hardware and the source of the
times, heft refused for throughput, a plan given as the graph answered with what to give, and the parts table's
bytes in human units."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybrid.capture.profile import Profile, op_signature
from tests.cli.helpers import error_line, hybrid, run
from tests.placement.random_graphs import random_inference_graph
from tests.placement.test_place_inputs import _captured_like


def one_error(*args: object) -> str:
    """The one error line of a refused `hybrid place ARGS`."""
    return error_line("place", *args)


@pytest.fixture()
def captured(tmp_path: Path) -> Path:
    """A random inference graph with per-op FLOPs and bytes and a capture's record of its roofline costs (for
    p2200 and its host, the Xeon Gold 6248R), as `hybrid capture --device p2200` writes."""
    g, gp = _captured_like(tmp_path)
    d = json.loads(gp.read_text())
    d["capture"] = {"tool": "hybrid.capture", "training": False,
                    "costs": {"model": "roofline", "device": "p2200", "gpu": {"name": "Quadro P2200"},
                              "cpu": {"name": "Xeon Gold 6248R"}}}
    gp.write_text(json.dumps(d))
    return gp


# ---- 4. which hardware and which cost source -----------------------------------------------------------------

def test_the_hardware_and_source_of_the_times_are_printed_and_in_json(captured: Path) -> None:
    r = run("place", "--graph", captured, "--scheduler", "greedy")
    assert r.exit_code == 0, r.output
    assert ("times for: GPU p2200 (roofline, as captured), CPU xeon-6248r (roofline, as captured); link of link: "
            "2 GB/s h2d, 2 GB/s d2h") in r.output
    j = json.loads(run("place", "--graph", captured, "--scheduler", "greedy", "--json").output)
    c = j["costs"]
    assert c["gpu"]["times_for"] == "p2200" and c["gpu"]["source"] == "roofline"
    assert c["cpu"]["times_for"] == "xeon-6248r" and c["cpu"]["source"] == "roofline"
    assert c["link"]["device"] == "link" and c["link"]["h2d_bytes_per_s"] == 2e9


def test_recosted_and_measured_times_say_so(captured: Path, tmp_path: Path) -> None:
    r = run("place", "--graph", captured, "--scheduler", "greedy", "--device", "v100-16gb", "--cpu", "epyc-2c",
            "--json")
    assert r.exit_code == 0, r.output
    c = json.loads(r.output[r.output.index("{"):])["costs"]
    assert (c["gpu"]["times_for"], c["cpu"]["times_for"]) == ("v100-16gb", "epyc-2c")
    assert "re-costed by --device" in c["line"] and "re-costed by --cpu" in c["line"]
    assert "link of v100-16gb" in c["line"]
    from hybrid.graph import Graph

    g = Graph.load(captured)
    prof = tmp_path / "cpu.prof.json"
    Profile("cpu", "EPYC 7B13", {op_signature(g, op): {"time_s": 7e-3, "samples": 1, "target": "x"}
                                 for op in g.ops[:2]}).save(prof)
    r = run("place", "--graph", captured, "--scheduler", "greedy", "--profile", prof)
    assert r.exit_code == 0, r.output
    assert f"CPU xeon-6248r (measured for 2 of {len(g.ops)} ops on EPYC 7B13, the rest roofline" in r.output
    assert "GPU p2200 (roofline, as captured)" in r.output


def test_a_graph_without_a_cost_record_says_its_times_are_its_own(tmp_path: Path) -> None:
    gp = tmp_path / "g.json"
    random_inference_graph(2, stages=2).save(gp)
    r = run("place", "--graph", gp, "--scheduler", "all-gpu")
    assert r.exit_code == 0, r.output
    assert "times for: GPU link (the graph's own, source not recorded)" in r.output


def test_a_graph_with_an_odd_capture_record_still_says_its_source(tmp_path: Path) -> None:
    """A graph file is data: a `capture` record that is not an object (or profiles that are not) is read as no
    record, not a traceback (it crashed with AttributeError)."""
    gp = tmp_path / "g.json"
    doc = random_inference_graph(2, stages=2).to_json()
    doc["capture"] = "x"
    gp.write_text(json.dumps(doc))
    r = run("place", "--graph", gp, "--scheduler", "all-gpu")
    assert r.exit_code == 0, r.output
    assert "times for: GPU" in r.output and "Traceback" not in r.output


# ---- 5. heft places for latency only --------------------------------------------------------------------------

def test_heft_with_throughput_is_refused(tmp_path: Path) -> None:
    gp = tmp_path / "g.json"
    random_inference_graph(7, stages=4).save(gp)
    line = one_error("--graph", gp, "--scheduler", "heft", "--objective", "throughput")
    assert "--scheduler heft" in line and "latency only" in line and "greedy or exact" in line
    assert run("place", "--graph", gp, "--scheduler", "heft").exit_code == 0   # latency: as before
    r = run("place", "--graph", gp, "--scheduler", "all", "--objective", "throughput", "--parts", "fine",
            "--time-limit", "10s")
    assert r.exit_code == 0, r.output
    heft_row = next(ln for ln in r.output.splitlines() if ln.startswith("heft"))
    assert "(placed for latency)" in heft_row
    text = " ".join(run("place", "--help").output.split())
    assert "heft places for latency only" in text


# ---- 6. a plan given where the graph goes ----------------------------------------------------------------------

def test_a_plan_given_as_the_graph_says_to_give_the_graph(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"format": "hybrid-plan/1"}))
    p = hybrid("place", "--graph", plan)
    assert p.returncode == 2, p.stderr
    assert "give here the graph file the plan was made for" in p.stderr
    assert "? use --plan)" not in p.stderr   # place has no --plan


# ---- 7. the parts table in human units ------------------------------------------------------------------------

def test_show_parts_prints_bytes_in_human_units_and_json_keeps_bytes(tmp_path: Path) -> None:
    gp = tmp_path / "g.json"
    random_inference_graph(7, stages=4).save(gp)
    r = run("place", "--graph", gp, "--scheduler", "greedy", "--show-parts")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    head = next(ln for ln in lines if ln.split()[:2] == ["part", "kind"])
    assert "params" in head.split() and "sent" in head.split() and "param_bytes" not in head
    first = lines[lines.index(head) + 1]
    assert "32 KiB" in first and "MiB" in first, first   # 8 parameters of 4096 B; activations of 10^5 B and more
    j = json.loads(run("place", "--graph", gp, "--scheduler", "greedy", "--show-parts", "--json").output)
    row = j["part_table"][0]
    assert row["param_bytes"] == 8 * 4096 and isinstance(row["out_bytes"], int)
