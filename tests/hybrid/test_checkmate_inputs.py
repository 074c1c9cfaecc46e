"""`hybrid import checkmate` on malformed node-link files and bad --time-unit / --scale-to: one line naming the
node, field or flag (a HybridError, `error: ...`, exit 2), never a Python traceback."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

import pytest
from click.testing import CliRunner

from hybrid.cli.main import cli
from hybrid.errors import FormatError, HybridError
from hybrid.graph.importers.checkmate import load_checkmate


def _base() -> dict[str, Any]:
    """A valid Checkmate-style file, shaped as Moccasin's `*_train_nx.json` (int ids, name, cost_cpu, cost_ram)."""
    return {"directed": True, "multigraph": False, "graph": {"name": "tiny"},
            "nodes": [{"id": 0, "name": "conv", "backward": False, "cost_cpu": 10, "cost_ram": 100},
                      {"id": 7, "name": "loss", "backward": False, "cost_cpu": 5, "cost_ram": 4},
                      {"id": 9, "name": "conv_grad", "backward": True, "cost_cpu": 20, "cost_ram": 100}],
            "links": [{"source": 0, "target": 7}, {"source": 7, "target": 9}, {"source": 0, "target": 9}]}


def _layered() -> dict[str, Any]:
    """A valid random_layered-style file: ids in 'name', an explicit graph.order, links as {"0", "1"}."""
    return {"graph": {"name": "rl", "order": [1, 0]},
            "nodes": [{"name": 0, "duration": 3, "out_cost": 8, "param_cost": 0},
                      {"name": 1, "duration": 1, "out_cost": 16, "param_cost": 32}],
            "links": [{"0": 1, "1": 0}]}


def _set(path: str, value: Any, base: Callable[[], dict[str, Any]] = _base) -> dict[str, Any]:
    """`base()` with the field at dotted `path` (list indices as numbers) set to `value`."""
    d = base()
    *head, last = path.split(".")
    o: Any = d
    for k in head:
        o = o[int(k)] if isinstance(o, list) else o[k]
    o[int(last) if isinstance(o, list) else last] = value
    return d


BAD_FILES = [
    ("graph-is-a-list", _set("graph", []), r"field 'graph' must be an object"),
    ("mixed-int-and-str-ids", _set("nodes.1.id", "x"), r"node ids mix integers and strings \(0 and 'x'\)"),
    ("cost-ram-text", _set("nodes.1.cost_ram", "abc"),
     r"node 7: cost_ram must be a non-negative integer \(bytes\), got 'abc'"),
    ("nodes-are-numbers", _set("nodes", [1, 2]), r"nodes\[0\] must be an object with an 'id' or 'name', got 1"),
    ("nodes-not-a-list", _set("nodes", {"0": {}}), r"field 'nodes' must be a list"),
    ("cost-ram-negative", _set("nodes.1.cost_ram", -4), r"node 7: cost_ram must be a non-negative integer"),
    ("cost-ram-fraction", _set("nodes.1.cost_ram", 4.5), r"node 7: cost_ram must be a whole number of bytes"),
    ("cost-ram-huge", _set("nodes.1.cost_ram", 10**30), r"node 7: cost_ram must be at most"),
    ("cost-ram-null", _set("nodes.1.cost_ram", None), r"node 7: cost_ram must be a non-negative integer"),
    ("cost-cpu-text", _set("nodes.2.cost_cpu", "fast"), r"node 9: cost_cpu must be a non-negative number, got 'fast'"),
    ("cost-cpu-bool", _set("nodes.2.cost_cpu", True), r"node 9: cost_cpu must be a non-negative number, got True"),
    ("cost-cpu-overflows-float", _set("nodes.2.cost_cpu", 10**400), r"node 9: cost_cpu must be at most 1e\+300"),
    ("backward-text", _set("nodes.2.backward", "yes"), r"node 9: backward must be true or false, got 'yes'"),
    ("name-is-a-list", _set("nodes.1.name", ["l"]), r"node 7: name must be a non-empty string"),
    ("id-is-a-list", _set("nodes.1.id", [7]), r"nodes\[1\]: 'id' must be an integer or a non-empty string"),
    ("id-twice", _set("nodes.1.id", 0), r"node id 0 appears twice \(nodes\[0\] and nodes\[1\]\)"),
    ("links-not-a-list", _set("links", {"source": 0}), r"field 'links' must be a list"),
    ("link-is-a-number", _set("links.1", 3), r"links\[1\] must be an object with 'source' and 'target'"),
    ("link-end-unhashable", _set("links.1.source", [7]), r"links\[1\] names an unknown node \(\[7\] -> 9\)"),
    ("link-without-target", {**_base(), "links": [{"source": 0}]}, r"links\[0\] names an unknown node \(0 -> None\)"),
    ("graph-name-object", _set("graph.name", {"a": 1}), r"graph.name must be a non-empty string"),
    ("order-not-a-list", _set("graph.order", "1,0", _layered), r"graph.order must be a list of node ids"),
    ("order-unknown-node", _set("graph.order", [1, "0"], _layered), r"graph.order\[1\] names no node: '0'"),
    ("order-unhashable", _set("graph.order", [1, [0]], _layered), r"graph.order\[1\] names no node: \[0\]"),
    ("order-twice", _set("graph.order", [1, 1], _layered), r"exactly once: node 1 twice"),
    ("order-missing-one", _set("graph.order", [1], _layered), r"exactly once: node 0 is missing"),
    ("param-cost-text", _set("nodes.1.param_cost", "big", _layered), r"node 1: param_cost must be a non-negative"),
    ("duration-negative", _set("nodes.0.duration", -1, _layered), r"node 0: duration must be a non-negative number"),
]


def _write(tmp_path: Path, d: dict[str, Any]) -> Path:
    p = tmp_path / "cm.json"
    p.write_text(json.dumps(d))
    return p


@pytest.mark.parametrize("d, match", [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES])
def test_a_malformed_file_is_refused_naming_the_node_and_field(tmp_path, d, match) -> None:
    with pytest.raises(FormatError, match=match) as e:
        load_checkmate(_write(tmp_path, d))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("d, match", [c[1:] for c in BAD_FILES[:4]], ids=[c[0] for c in BAD_FILES[:4]])
def test_the_command_prints_one_error_line_and_exits_2(tmp_path, d, match) -> None:
    r = CliRunner().invoke(cli, ["import", "checkmate", str(_write(tmp_path, d)), "--out", str(tmp_path / "g.json")])
    assert r.exit_code == 2, r.output   # an uncaught exception would be exit 1 with a traceback
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert not (tmp_path / "g.json").exists()


BAD_FLAGS = [
    ("scale-to-0s", {"scale_to": "0s"}, r"--scale-to must be more than 0, got '0s'"),
    ("scale-to-0.0", {"scale_to": 0.0}, r"--scale-to must be more than 0"),
    ("scale-to-nan", {"scale_to": float("nan")}, r"--scale-to must be a finite number"),
    ("scale-to-negative", {"scale_to": "-1s"}, r"--scale-to must not be negative, got '-1s'"),
    ("time-unit-nan", {"time_unit": "nan"}, r"--time-unit must be a finite positive number.*, got 'nan'"),
    ("time-unit-inf", {"time_unit": "inf"}, r"--time-unit must be a finite positive number.*, got 'inf'"),
    ("time-unit-negative", {"time_unit": "-1e-6"}, r"--time-unit must be a finite positive number"),
    ("time-unit-0", {"time_unit": "0"}, r"--time-unit must be a finite positive number"),
    ("time-unit-float-nan", {"time_unit": float("nan")}, r"--time-unit must be a finite positive number"),
    ("time-unit-word", {"time_unit": "fortnights"}, r"--time-unit 'fortnights': use s, ms, us, ns"),
    ("time-unit-huge", {"time_unit": "1e300"}, r"--time-unit 1e300: node 9's cost_cpu/duration 20 would take .* s"),
]


@pytest.mark.parametrize("kw, match", [c[1:] for c in BAD_FLAGS], ids=[c[0] for c in BAD_FLAGS])
def test_a_bad_time_flag_is_refused_naming_the_flag(tmp_path, kw, match) -> None:
    with pytest.raises(HybridError, match=match):
        load_checkmate(_write(tmp_path, _base()), **kw)


@pytest.mark.parametrize("flag, value", [("--scale-to", "0s"), ("--time-unit", "nan")])
def test_the_command_names_the_time_flag(tmp_path, flag, value) -> None:
    r = CliRunner().invoke(cli, ["import", "checkmate", str(_write(tmp_path, _base())), flag, value,
                                 "--out", str(tmp_path / "g.json")])
    assert r.exit_code == 2 and r.output.startswith(f"error: {flag} must be"), r.output
    assert not (tmp_path / "g.json").exists()


def test_a_file_with_no_nodes_is_refused(tmp_path) -> None:
    d = _base()
    d["nodes"], d["links"] = [], []
    with pytest.raises(FormatError, match=r"field 'nodes' is empty"):
        load_checkmate(_write(tmp_path, d))


def test_scale_to_needs_some_compute_to_scale(tmp_path) -> None:
    d = _base()
    for nd in d["nodes"]:
        nd["cost_cpu"] = 0
    with pytest.raises(HybridError, match=r"--scale-to: .* add up to 0, which cannot be scaled; use --time-unit"):
        load_checkmate(_write(tmp_path, d), scale_to="1s")
    assert sum(o.time_s for o in load_checkmate(_write(tmp_path, d)).ops) == 0   # without it, zero compute is kept


def test_what_the_checks_leave_alone_still_imports(tmp_path) -> None:
    """Null name / param_cost / backward / graph, repeated names and whole float byte counts read as before."""
    d = _base()
    d["graph"] = None
    d["nodes"][0].update(name=None, backward=None, cost_ram=100.0)
    d["nodes"][1]["name"] = d["nodes"][2]["name"] = "same"
    g = load_checkmate(_write(tmp_path, d), time_unit="ms")
    assert [o.id for o in g.ops] == ["0", "same", "same#9"] and g.name == "cm"
    assert g.tensor("0").bytes == 100 and g.tensor("0").kind == "activation"
    rl = _set("nodes.0.param_cost", None, _layered)
    assert [o.id for o in load_checkmate(_write(tmp_path, rl)).ops] == ["1", "0"]
    scaled = load_checkmate(_write(tmp_path, _base()), scale_to=2.5, time_unit="1e-3")
    assert sum(o.time_s for o in scaled.ops) == pytest.approx(2.5)


def test_time_unit_and_scale_to_together_are_refused(tmp_path) -> None:
    r = CliRunner().invoke(cli, ["import", "checkmate", str(_write(tmp_path, _base())), "--time-unit", "ms",
                                 "--scale-to", "2s", "--out", str(tmp_path / "g.json")])
    assert r.exit_code == 2 and r.output.startswith("error: give --time-unit or --scale-to, not both"), r.output
    r = CliRunner().invoke(cli, ["import", "checkmate", str(_write(tmp_path, _base())), "--scale-to", "2s",
                                 "--out", str(tmp_path / "g.json")])
    assert r.exit_code == 0, r.output


def test_the_default_time_unit_is_said_and_times_read_in_units(tmp_path) -> None:
    """The files' units differ between graphs: a default reading is said, the compute printed as other commands
    print times (not '0.0155 s'); --time-unit or --scale-to given says nothing."""
    f = tmp_path / "g.json"
    f.write_text(json.dumps(_base()))
    r = CliRunner().invoke(cli, ["import", "checkmate", str(f), "--out", str(tmp_path / "o.json")])
    assert r.exit_code == 0, r.output
    assert "note: times read as --time-unit us (the default)" in r.output
    assert re.search(r"compute \d[\d.]* (us|ms|s)$", r.output.splitlines()[0]), r.output
    r = CliRunner().invoke(cli, ["import", "checkmate", str(f), "--time-unit", "ms", "--out", str(tmp_path / "p.json")])
    assert r.exit_code == 0 and "note:" not in r.output, r.output
