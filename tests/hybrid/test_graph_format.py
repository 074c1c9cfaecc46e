"""hybrid-graph/1 loading: every FORMATS.md rule rejected with a message naming the offending id and field."""
from __future__ import annotations

import copy
import json

import pytest

from hybrid.device import PRESETS, resolve_device
from hybrid.errors import FormatError, HybridError
from hybrid.graph import Graph, Op, Tensor
from hybrid.units import parse_bandwidth, parse_bytes, parse_duration

GOOD = {
    "format": "hybrid-graph/1", "name": "g",
    "device": {"name": "v100-16gb", "memory_bytes": 17179869184, "h2d_bytes_per_s": 12e9, "d2h_bytes_per_s": 12e9,
               "transfer_latency_s": 0.0},
    "tensors": [{"id": "w1", "bytes": 4194304, "kind": "param", "persistent": True},
                {"id": "x", "bytes": 1048576, "kind": "input", "persistent": True},
                {"id": "a1", "bytes": 2097152, "kind": "activation", "shape": [512, 1024]}],
    "ops": [{"id": "fc1", "kind": "matmul", "inputs": ["x", "w1"], "outputs": ["a1"], "time_s": 0.0012,
             "workspace_bytes": 0, "impls": [{"name": "gemm", "time_s": 0.0012, "workspace_bytes": 0}],
             "updates": [], "cpu_time_s": 0.009, "aten": {"target": "mm"}},
            {"id": "step", "kind": "sgd", "inputs": ["w1", "a1"], "outputs": [], "time_s": 1e-4, "updates": ["w1"]}],
}


def mutate(fn):
    d = copy.deepcopy(GOOD)
    fn(d)
    return d


def test_round_trip_keeps_extra_fields(tmp_path):
    g = Graph.from_json(GOOD)
    p = tmp_path / "g.json"
    g.save(p)
    again = Graph.load(p)
    assert again.tensor("a1").extra == {"shape": [512, 1024]}
    assert again.op("fc1").extra == {"aten": {"target": "mm"}}
    assert again.to_json() == g.to_json()
    assert again.sha256 == g.sha256


@pytest.mark.parametrize("change, message", [
    (lambda d: d["tensors"].append({"id": "x", "bytes": 1}), "tensor id 'x' appears twice"),
    (lambda d: d["ops"].append(dict(d["ops"][0])), "op id 'fc1' appears twice"),
    (lambda d: d["ops"][0]["inputs"].append("ghost"), "op 'fc1' field 'inputs' names unknown tensor 'ghost'"),
    (lambda d: d["tensors"][2].update(bytes=-5), "tensor 'a1'.*'bytes' must not be negative"),
    (lambda d: d["ops"][0].update(time_s=-1.0), "op 'fc1'.*'time_s' must not be negative"),
    (lambda d: d["tensors"][2].update(kind="weights"), "tensor 'a1'.*'kind' is 'weights'"),
    (lambda d: d.update(format="hybrid-graph/2"), "expected 'hybrid-graph/1'"),
    (lambda d: d["ops"][0]["outputs"].append("w1"), "outputs persistent tensor 'w1'"),
    (lambda d: d["tensors"].append({"id": "orphan", "bytes": 1}), "tensor 'orphan' is not persistent and no op outputs it"),
    (lambda d: d["ops"][1].update(updates=["x2"]), "names unknown tensor 'x2'"),
    (lambda d: d["ops"][1].update(updates=["x"]), "updates 'x', which is not among its inputs"),
    (lambda d: d["ops"][0].update(inputs=["x", "w1", "a1"]), "reads its own output 'a1'"),
])
def test_rejections_name_the_offender(change, message):
    with pytest.raises(FormatError, match=message):
        Graph.from_json(mutate(change))


def test_cycle_is_named():
    d = mutate(lambda d: None)
    d["tensors"].append({"id": "b", "bytes": 1})
    d["ops"][0]["inputs"] = ["x", "w1", "b"]
    d["ops"].append({"id": "back", "inputs": ["a1"], "outputs": ["b"], "time_s": 1.0})
    with pytest.raises(FormatError, match="cycle.*fc1.*back|cycle.*back.*fc1") as e:
        Graph.from_json(d)
    assert "in-place update" not in str(e.value)    # a dataflow cycle: no update edge to blame


def test_duplicate_impl_name_is_named():
    d = mutate(lambda d: d["ops"][0]["impls"].append({"name": "gemm", "time_s": 0.002}))
    with pytest.raises(FormatError, match="op 'fc1' lists impl name 'gemm' more than once"):
        Graph.from_json(d)


@pytest.mark.parametrize("value", [{}, 0, False, ""])
def test_impls_that_are_not_a_list_are_refused_even_when_falsy(value) -> None:
    """`d.get("impls") or []` read {}, 0, false and "" as "no impls" (a format audit's finding)."""
    with pytest.raises(FormatError, match=r"op 'fc1': field 'impls' must be a list, got "):
        Graph.from_json(mutate(lambda d: d["ops"][0].update(impls=value)))
    assert Graph.from_json(mutate(lambda d: d["ops"][0].update(impls=None))).op("fc1").impls == ()


def test_an_op_that_lists_impls_takes_only_what_it_leaves_out_from_the_first() -> None:
    """Without its own time_s, its stated workspace was replaced by the first impl's (999 B read as 0)."""
    def change(d):
        del d["ops"][0]["time_s"]
        d["ops"][0]["workspace_bytes"] = 999
        d["ops"][0]["impls"].append({"name": "gemm_ws", "time_s": 0.0012, "workspace_bytes": 999})
    op = Graph.from_json(mutate(change)).op("fc1")
    assert (op.time_s, op.workspace_bytes) == (0.0012, 999) and op.impls[op.default_impl].name == "gemm_ws"
    op = Graph.from_json(mutate(lambda d: (d["ops"][0].pop("time_s"), d["ops"][0].pop("workspace_bytes")))).op("fc1")
    assert (op.time_s, op.workspace_bytes) == (0.0012, 0)


def test_an_op_a_float_step_from_its_default_impl_is_that_impl() -> None:
    """Within the validator's tolerance the figures are the same (a profile's sums may differ in the last bits);
    where two differ only past the printed digits, the refusal shows them exactly."""
    import math

    g = Graph.from_json(mutate(lambda d: d["ops"][0].update(time_s=math.nextafter(0.0012, 1.0))))
    assert g.op("fc1").default_impl == 0
    with pytest.raises(FormatError, match=r"\(0\.00120001 s/0 B\) match none of its impls \(gemm 0\.0012 s/0 B\)"):
        Graph.from_json(mutate(lambda d: d["ops"][0].update(time_s=0.00120001)))


@pytest.mark.parametrize("change", [
    lambda op: op.update(time_s=0.001),                                  # its own time: no impl's
    lambda op: (op.pop("time_s"), op.update(workspace_bytes=999)),       # the first's time, its own workspace
])
def test_an_op_whose_own_figures_match_none_of_its_impls_is_refused(change) -> None:
    """Its own figures are its default implementation's: matching none, the planners timed the op by them and the
    validator by its first impl, and no command could write a plan of the graph (helper-126's probe: hybrid info
    accepted it, simulate/baseline/optimize each failed their own validation)."""
    with pytest.raises(FormatError, match=r"op 'fc1': its time_s and workspace_bytes \(.*\) match none of its "
                                          r"impls \(gemm 1\.2 ms/0 B\); they are its default implementation's: set "
                                          r"them to one impl's figures, or leave both out"):
        Graph.from_json(mutate(lambda d: change(d["ops"][0])))


@pytest.mark.parametrize("name", [""])
def test_an_empty_graph_name_is_refused(name: str) -> None:
    """A plan names its graph, and rule 0 refuses a plan naming none: a graph named '' loaded, then no command could
    write a plan of it (helper-126's probe)."""
    with pytest.raises(FormatError, match=r"field 'name' must be a non-empty string .*; leave it out for 'unnamed'"):
        Graph.from_json(mutate(lambda d: d.update(name=name)))
    assert Graph.from_json(mutate(lambda d: d.pop("name"))).name == "unnamed"


def test_a_graph_whose_ops_take_longer_than_any_plan_may_last_is_refused() -> None:
    """Each time in range, but together over the 1e9 s a plan may last: loaded, then every plan was refused (rule 0)."""
    with pytest.raises(FormatError, match=r"its ops take at least .* \(each at its fastest, the host's beside the "
                                          r"device's\), more than 1e\+09 s, the longest a plan may last"):
        Graph("g", [Tensor("x", 8, "input", True)], [Op(f"o{i}", "k", ("x",), (), 9e8, 0) for i in range(4)])
    # a faster implementation (or the host) could take a plan under the limit: loaded
    assert Graph("g", [Tensor("x", 8, "input", True)], [Op(f"o{i}", "k", ("x",), (), 9e8, 0, cpu_time_s=1.0)
                                                         for i in range(4)])


def test_a_key_given_twice_in_one_object_is_refused_naming_it(tmp_path) -> None:
    """Python's json kept the last: a tensor {"id": "a1", "bytes": -5, "id": "a2", "bytes": 1000} read as a2."""
    text = json.dumps(GOOD).replace('{"id": "a1", "bytes": 2097152', '{"id": "a1", "bytes": -5, "id": "a1", '
                                                                       '"bytes": 2097152')
    p = tmp_path / "g.json"
    p.write_text(text)
    with pytest.raises(FormatError, match=r"g\.json: key 'id' appears twice in one object"):
        Graph.load(p)


def test_cycle_made_by_update_order_says_so_and_how_to_fix_it():
    """An optimizer op listed before the op that reads the weight it updates: no tensor flows in a cycle, but
    program order (docs/formats.md) runs the reader after the update, and the update needs the reader's
    gradient. The message names that edge, the list order and the fix."""
    d = mutate(lambda d: None)
    d["tensors"].append({"id": "g1", "bytes": 4194304, "kind": "gradient"})
    d["ops"] = [{"id": "sgd", "inputs": ["w1", "g1"], "outputs": [], "updates": ["w1"], "time_s": 1e-4},
                d["ops"][0],
                {"id": "bw", "inputs": ["a1", "x"], "outputs": ["g1"], "time_s": 1e-3}]
    with pytest.raises(FormatError) as e:
        Graph.from_json(d)
    msg = str(e.value)
    assert "cycle through their tensors: fc1 -> bw -> sgd -> fc1" in msg
    assert ("the edge sgd -> fc1 is not dataflow but the order of an in-place update: 'fc1' reads 'w1' after "
            "'sgd' updates it in place, because ops[0] 'sgd' is listed before ops[1] 'fc1'") in msg, msg
    assert "list it before 'sgd' in 'ops'" in msg
    d["ops"] = d["ops"][1:] + d["ops"][:1]   # the fix: the reader first
    assert [o.id for o in Graph.from_json(d).ops] == ["fc1", "bw", "sgd"]


def test_update_order_follows_program_order():
    g = Graph.from_json(GOOD)
    preds = {g.ops[int(i)].id for i in g.arrays.pred_idx[g.arrays.pred_ptr[1]:g.arrays.pred_ptr[2]]}
    assert preds == {"fc1"}  # fc1 reads w1 before step updates it


def test_not_json_and_wrong_file_kind(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{nope")
    with pytest.raises(FormatError, match="not JSON"):
        Graph.load(p)
    p.write_text(json.dumps({"format": "hybrid-plan/1"}))
    with pytest.raises(FormatError, match="is this a plan"):
        Graph.load(p)


def test_units_and_device_flags():
    assert parse_bytes("10GiB") == 10 * 2**30 and parse_bytes("512MB") == 512 * 10**6 and parse_bytes(7) == 7
    assert parse_bandwidth("12GB/s") == 12e9 and parse_bandwidth("1.5GiB/s") == 1.5 * 2**30
    assert parse_duration("30m") == 1800 and parse_duration("1h30m") == 5400 and parse_duration("90s") == 90
    with pytest.raises(HybridError):
        parse_duration("3 fortnights")
    dev = resolve_device(None, "a100-40gb", memory="10GiB", h2d="5GB/s")
    assert dev.memory_bytes == 10 * 2**30 and dev.h2d_bytes_per_s == 5e9
    assert dev.d2h_bytes_per_s == PRESETS["a100-40gb"].d2h_bytes_per_s
    with pytest.raises(HybridError, match="unknown device"):
        resolve_device(None, "tpu-v9")


def test_a_field_named_almost_like_one_the_format_reads_is_warned_about(tmp_path) -> None:
    """Extra fields are allowed and ignored, so `workspce_bytes` dropped a 1 GiB workspace without a word."""
    import json

    from click.testing import CliRunner

    from hybrid.cli.main import cli
    from hybrid.graph import Graph
    from tests.cli.helpers import RESNET

    d = json.loads(open(RESNET).read())
    for i in (3, 5):
        d["ops"][i]["workspce_bytes"] = 1 << 30
    assert Graph.from_json(json.loads(open(RESNET).read())).misspelt_fields() == []   # the captured fields pass
    g = Graph.from_json(d)
    assert g.misspelt_fields() == [f"op {d['ops'][3]['id']!r} and 1 more: field 'workspce_bytes' is not read (did "
                                   "you mean 'workspace_bytes'?); extra fields are ignored"]
    path = tmp_path / "g.json"
    path.write_text(json.dumps(d))
    r = CliRunner().invoke(cli, ["info", "--graph", str(path)])
    assert r.exit_code == 0 and "warning: " in r.output and "did you mean 'workspace_bytes'?" in r.output


def test_fields_named_on_purpose_beside_a_read_one_are_not_taken_for_typos() -> None:
    """gpu_time_s, time_us, nbytes, devices: close to a read name, but another field (review of the warning)."""
    import json

    from hybrid.graph import Graph
    from tests.cli.helpers import RESNET

    d = json.loads(open(RESNET).read())
    for key in ("gpu_time_s", "time_us", "time_ms", "devices"):
        d["ops"][3][key] = 1
    d["tensors"][2]["nbytes"] = 5
    d["devices"] = 1
    assert Graph.from_json(d).misspelt_fields() == []
    d["ops"][3]["tme_s"] = 1
    assert [line.split(": ")[1] for line in Graph.from_json(d).misspelt_fields()] == [
        "field 'tme_s' is not read (did you mean 'time_s'?); extra fields are ignored"]
    # a doubled letter contains the read name too, and was passed over as deliberate (a new user's `time_ss`)
    d["ops"][3].pop("tme_s")
    d["ops"][4]["time_ss"] = 1
    d["tensors"][3]["bytess"] = 5
    assert sorted(line.split(": ")[1] for line in Graph.from_json(d).misspelt_fields()) == [
        "field 'bytess' is not read (did you mean 'bytes'?); extra fields are ignored",
        "field 'time_ss' is not read (did you mean 'time_s'?); extra fields are ignored"]


def test_a_devices_extra_fields_are_written_back_and_a_near_miss_is_named(tmp_path) -> None:
    """A device's fields this reader does not know are kept through a save (a plan's, an op's and a tensor's
    were; the device's were dropped), are not part of the device, and a near miss of a read field (a reserve
    read as 0) is named like an op's."""
    import json
    from dataclasses import replace

    from hybrid.device import Device
    from hybrid.graph import Graph
    from hybrid.swap.baselines import run_baseline
    from hybrid.plan import Plan
    from tests.cli.helpers import RESNET

    d = json.loads(open(RESNET).read())
    d["device"].pop("reserve_bytes", None)
    d["device"]["pcie_gen"] = 4
    d["device"]["reserv_bytes"] = 1 << 20   # a typo: the device has no reserve
    g = Graph.from_json(d)
    assert g.device.extra == {"pcie_gen": 4, "reserv_bytes": 1 << 20} and g.device.reserve_bytes == 0
    assert g.device == Device.from_json({k: v for k, v in d["device"].items() if k not in ("pcie_gen", "reserv_bytes")})
    assert [line.split(": ", 1)[1] for line in g.misspelt_fields()] == [
        "field 'reserv_bytes' is not read (did you mean 'reserve_bytes'?); extra fields are ignored"]
    g.save(tmp_path / "g.json")
    assert json.loads((tmp_path / "g.json").read_text())["device"]["pcie_gen"] == 4
    plan = run_baseline(g, replace(g.device, memory_bytes=2 * g.device.memory_bytes), "belady")
    plan.save(tmp_path / "p.json")
    assert Plan.load(tmp_path / "p.json").device.extra["pcie_gen"] == 4   # replace() keeps them too


@pytest.mark.parametrize("allocation", [
    {"kind": "unconstrained", "allocator": "cudaMallocAsync"},
    {"kind": "arena", "arena_bytes": 1024, "offsets": {"a": 0, "b": 512}, "note": {"by": "me"}},
    {"kind": "size_classes", "classes": [{"bytes": 512, "count": 2}], "class_of": {"a": 0}, "pool_id": 3},
])
def test_an_allocations_extra_fields_are_written_back_as_read(allocation: dict) -> None:
    """FORMATS.md: extra fields are allowed and ignored by readers that do not know them; like a plan's, an
    event's and a device's, an allocation's survive a load and a save (they were dropped) and do not make two
    allocations differ."""
    from hybrid.plan.types import allocation_from_json

    a = allocation_from_json(allocation)
    assert a.to_json() == allocation
    known = {k: v for k, v in allocation.items() if k in ("kind", "arena_bytes", "offsets", "classes", "class_of")}
    assert allocation_from_json(known) == a and allocation_from_json(known).to_json() == known
