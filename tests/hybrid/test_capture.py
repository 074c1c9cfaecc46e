"""Capture of modules defined here (not in the zoo): faithful contents, bindings, errors, and bitwise replay."""
from __future__ import annotations

import copy
import json

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from hybrid.capture import capture, portable_kernels  # noqa: E402
from hybrid.capture.interpreter import (  # noqa: E402
    ReplayContext, bind, eager_step, mismatches, replay_step, run_graph, run_op)
from hybrid.errors import HybridError  # noqa: E402
from hybrid.graph import Graph  # noqa: E402
from hybrid.graph.arrays import dependency_edges
from hybrid.graph.order import ids, latest_first_order

pytestmark = pytest.mark.torch


class Net(nn.Module):
    """Conv + batch norm + in-place ReLU + dropout + a weight used twice + views; nothing from the zoo."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.3)
        self.fc1 = nn.Linear(8 * 4 * 4, 16)
        self.shared = nn.Linear(16, 16)
        self.head = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn(self.conv(x)), inplace=True)
        y = F.max_pool2d(y, 2)
        y = y.flatten(1)
        y = self.drop(y)
        y = torch.tanh(self.fc1(y))
        y = self.shared(self.shared(y).transpose(0, 1).t())   # weight sharing and folded views
        y += 1.0
        return self.head(self.drop(y))


def make_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)


@pytest.fixture(scope="module")
def net() -> Net:
    torch.manual_seed(0)
    return Net()


@pytest.fixture(scope="module")
def adam_graph(net: Net) -> Graph:
    x, t = make_batch()
    return capture(net, (x,), F.cross_entropy, t, optimizer="adam", lr=1e-2, name="net")


def train_step(module: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, t: torch.Tensor, seed: int):
    torch.manual_seed(seed)
    opt.zero_grad(set_to_none=True)
    with portable_kernels():
        loss = F.cross_entropy(module(x), t)
        loss.backward()
    grads = {n: p.grad.clone() for n, p in module.named_parameters()}
    opt.step()
    return loss.detach(), grads


def assert_same(result, module: nn.Module, opt: torch.optim.Optimizer, loss, grads) -> None:
    assert torch.equal(result.loss, loss)
    for n, p in module.named_parameters():
        assert torch.equal(result.grads[n], grads[n]), n
        assert torch.equal(result.params[n], p.detach()), n
        for key, v in opt.state[p].items():
            if key != "step":
                assert torch.equal(result.state[n][key], v), (n, key)
    for n, buf in module.named_buffers():
        assert torch.equal(result.buffers[n], buf), n


# ---- contents ------------------------------------------------------------------------------------------------

def test_adam_graph_counts_parameters_state_and_updates(net: Net, adam_graph: Graph) -> None:
    g = adam_graph
    param_bytes = sum(p.numel() * p.element_size() for p in net.parameters())
    by_kind = {}
    for t in g.tensors:
        by_kind[t.kind] = by_kind.get(t.kind, 0) + t.bytes
    assert by_kind["param"] == param_bytes
    assert by_kind["optimizer_state"] == 2 * param_bytes
    for t in g.tensors:
        if t.kind in ("param", "optimizer_state", "input"):
            assert t.persistent, t.id
    updates = {u: o for o in g.ops for u in o.updates}
    for name, _ in net.named_parameters():
        op = updates[f"param:{name}"]
        assert op.kind == "adam" and op.extra["phase"] == "optimizer"
        assert set(op.updates) == {f"param:{name}", f"state:{name}:exp_avg", f"state:{name}:exp_avg_sq"}
    # The graph is valid (construction validates) and survives a JSON round trip with its extra fields.
    again = Graph.from_json(json.loads(g.dumps()))
    assert again.to_json() == g.to_json()
    assert again.extra["bindings"]["loss"] == g.extra["bindings"]["loss"]


def test_views_are_folded_and_storages_counted_once(adam_graph: Graph) -> None:
    g = adam_graph
    view_kinds = {"view", "t", "transpose", "expand", "permute", "_unsafe_view", "alias", "detach", "select",
                  "slice", "unsqueeze", "squeeze", "reshape"}
    assert not [o.id for o in g.ops if o.kind in view_kinds]
    # Every non-persistent tensor is one storage: its bytes equal its recorded geometry's extent.
    for t in g.tensors:
        m = t.extra
        if t.persistent or not m.get("shape"):
            continue
        itemsize = {"float32": 4, "int64": 8, "bool": 1, "uint8": 1}[m["dtype"]]
        extent = 1 + sum((s - 1) * st for s, st in zip(m["shape"], m["stride"])) if all(m["shape"]) else 0
        assert t.bytes == (m["storage_offset"] + extent) * itemsize, t.id
    # Some consumer reads a storage through a recorded view chain.
    chains = [a for o in g.ops for a in json.dumps(o.extra["aten"]["args"]).split('"view"')[1:]]
    assert chains


def test_phases_and_kinds(adam_graph: Graph) -> None:
    g = adam_graph
    phases = [o.extra["phase"] for o in g.ops]
    assert phases.index("backward") > phases.index("forward")
    produced = {t: o for o in g.ops for t in o.outputs}
    for t in g.tensors:
        if not t.persistent:
            expected = "activation" if produced[t.id].extra["phase"] == "forward" else "gradient"
            assert t.kind == expected, t.id
    b = g.extra["bindings"]
    assert b["inputs"] == ["input:0"] and b["targets"] == ["target:0"]
    assert set(b["grads"]) == {n for n in b["params"]}


def test_random_ops_are_chained_through_the_rng_token(adam_graph: Graph) -> None:
    g = adam_graph
    rng = g.tensor("rng")
    assert rng.persistent and rng.bytes == 0 and rng.kind == "other"
    random_ops = [i for i, o in enumerate(g.ops) if "rng" in o.inputs]
    assert len(random_ops) == 2                       # two dropout masks
    for i in random_ops:
        assert "rng" in g.ops[i].updates
    edges = {(a, b) for a, b, _ in dependency_edges(g)}
    assert (random_ops[0], random_ops[1]) in edges    # order pinned for every valid schedule


def test_buffer_updates_are_in_place_ops_on_persistent_tensors(adam_graph: Graph) -> None:
    g = adam_graph
    updated = {u for o in g.ops for u in o.updates}
    assert {"buffer:bn.running_mean", "buffer:bn.running_var", "buffer:bn.num_batches_tracked"} <= updated
    for o in g.ops:
        for u in o.updates:
            assert g.tensor(u).persistent


def test_costs_are_filled_in(adam_graph: Graph) -> None:
    g = adam_graph
    for o in g.ops:
        c = o.extra["cost"]
        assert o.time_s >= 0 and o.cpu_time_s is not None and o.cpu_time_s >= 0
        assert c["flops"] >= 0 and c["io_bytes"] >= 0
    conv = next(o for o in g.ops if o.kind == "convolution")
    assert conv.extra["cost"]["flops"] == 2 * 4 * 8 * 8 * 8 * 3 * 3 * 3     # 2 * N*Cout*H*W * Cin*kh*kw
    adam = next(o for o in g.ops if o.id == "adam:head.weight")
    assert adam.extra["cost"]["io_bytes"] == 7 * 16 * 5 * 4
    assert g.extra["capture"]["costs"]["device"] == "v100-16gb"


def test_dtype_bf16_is_honoured() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    g = capture(m, (torch.randn(3, 8),), F.cross_entropy, torch.tensor([0, 1, 1]), optimizer="sgd", dtype="bf16")
    params = [t for t in g.tensors if t.kind == "param"]
    assert sum(t.bytes for t in params) == sum(p.numel() for p in m.parameters()) * 2
    assert {t.extra["dtype"] for t in params} == {"bfloat16"}
    assert g.tensor("target:0").extra["dtype"] == "int64"
    assert not [t for t in g.tensors if t.kind == "optimizer_state"]      # plain SGD has no state


def test_inference_graph_has_forward_only() -> None:
    m = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).eval()
    g = capture(m, (torch.randn(3, 8),), optimizer=None)
    assert {o.extra["phase"] for o in g.ops} == {"forward"}
    assert not [t for t in g.tensors if t.kind in ("gradient", "optimizer_state")]
    assert g.extra["bindings"]["loss"] is None and len(g.extra["bindings"]["outputs"]) == 1


def test_meta_module_far_larger_than_memory_captures() -> None:
    with torch.device("meta"):
        m = nn.Sequential(nn.Linear(100_000, 100_000), nn.Linear(100_000, 10))   # 40 GB of fp32 weights
    x = torch.empty(64, 100_000, device="meta")
    t = torch.empty(64, dtype=torch.long, device="meta")
    g = capture(m, (x,), F.cross_entropy, t, optimizer="adam")
    assert sum(t.bytes for t in g.tensors if t.kind == "param") == (100_000 * 100_001 + 10 * 100_001) * 4


def test_unused_parameter_gets_no_update() -> None:
    class Partial(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used = nn.Linear(4, 2)
            self.unused = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.used(x)

    g = capture(Partial(), (torch.randn(2, 4),), F.cross_entropy, torch.tensor([0, 1]))
    assert g.extra["bindings"]["grads"]["unused.weight"] is None
    assert not [o for o in g.ops if "param:unused.weight" in o.updates]


# ---- errors --------------------------------------------------------------------------------------------------

def one_line_error(fn, *args, **kwargs) -> str:
    with pytest.raises(HybridError) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_forward_failure_is_one_line() -> None:
    m = nn.Sequential(nn.Linear(8, 4), nn.Linear(5, 2))
    msg = one_line_error(capture, m, (torch.randn(3, 8),), F.cross_entropy, torch.tensor([0, 1, 1]))
    assert msg.startswith("the module's forward failed") and "[3, 4]" in msg, msg


def test_non_scalar_loss_is_one_line() -> None:
    m = nn.Linear(8, 4)
    msg = one_line_error(capture, m, (torch.randn(3, 8),), lambda out, t: (out - t) ** 2, torch.randn(3, 4))
    assert "not a scalar" in msg and "[3, 4]" in msg


def test_unsupported_optimizer_and_dtype_are_one_line() -> None:
    m = nn.Linear(8, 4)
    msg = one_line_error(capture, m, (torch.randn(3, 8),), lambda o: o.sum(), optimizer="lion")
    assert "lion" in msg and "adam" in msg
    assert "fp16" in one_line_error(capture, m, (torch.randn(3, 8),), lambda o: o.sum(), dtype="int3")
    assert "amsgrad" in one_line_error(capture, m, (torch.randn(3, 8),), lambda o: o.sum(),
                                       optimizer=torch.optim.Adam(m.parameters(), amsgrad=True))


@pytest.mark.parametrize("options, says", [
    ({"betas": 0.9}, "'betas' must be a pair of numbers in [0, 1), such as (0.9, 0.999), got 0.9"),
    ({"betas": (0.9, 1.5)}, "'betas' must be a pair of numbers in [0, 1)"),
    ({"eps": "1e-8"}, "'eps' must be a finite number, got '1e-8'"),
    ({"weight_decay": -0.1}, "'weight_decay' must not be negative, got -0.1"),
    ({"maximize": 1}, "'maximize' must be True or False, got 1"),
    ({"lr": float("nan")}, "'lr' must be a finite number, got nan"),
])
def test_an_optimizer_option_of_the_wrong_kind_is_one_line_naming_it(options: dict, says: str) -> None:
    """A TypeError inside the update (betas=0.9: "'float' object is not iterable") or a NaN step before."""
    m = nn.Linear(8, 4)
    msg = one_line_error(capture, m, (torch.randn(3, 8),), lambda o: o.sum(), optimizer="adam",
                         optimizer_options=options)
    assert says in msg


def test_data_dependent_forward_is_one_line() -> None:
    class Branchy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.sum() if x.sum() > 0 else -x.sum()

    msg = one_line_error(capture, Branchy(), (torch.randn(3, 8),), optimizer=None)
    assert "depends on tensor values" in msg


# ---- reference interpreter -----------------------------------------------------------------------------------

def test_replay_matches_eager_adam_bitwise(net: Net, adam_graph: Graph) -> None:
    x, t = make_batch()
    eager = copy.deepcopy(net)
    opt = torch.optim.Adam(eager.parameters(), lr=1e-2)
    before = copy.deepcopy(net)
    loss, grads = train_step(eager, opt, x, t, seed=7)
    result = replay_step(adam_graph, net, (x,), t, seed=7)
    assert_same(result, eager, opt, loss, grads)
    # The module itself is not modified by a replay.
    for (n, p), q in zip(net.named_parameters(), before.parameters()):
        assert torch.equal(p, q), n


def test_replay_in_another_valid_order_still_matches(net: Net, adam_graph: Graph) -> None:
    order = ids(adam_graph, latest_first_order(adam_graph))
    assert order != [o.id for o in adam_graph.ops]
    x, t = make_batch()
    eager = copy.deepcopy(net)
    opt = torch.optim.Adam(eager.parameters(), lr=1e-2)
    loss, grads = train_step(eager, opt, x, t, seed=3)
    assert_same(replay_step(adam_graph, net, (x,), t, seed=3, schedule=order), eager, opt, loss, grads)


def test_replay_rejects_an_invalid_schedule(net: Net, adam_graph: Graph) -> None:
    x, t = make_batch()
    order = [o.id for o in adam_graph.ops][::-1]
    with pytest.raises(HybridError, match="depends on"):
        replay_step(adam_graph, net, (x,), t, schedule=order)


def test_replay_sgd_momentum_over_two_steps() -> None:
    torch.manual_seed(1)
    m = Net()
    x, t = make_batch(1)
    g = capture(m, (x,), F.cross_entropy, t, optimizer="sgd", lr=0.1, optimizer_options={"momentum": 0.9})
    eager = copy.deepcopy(m)
    opt = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    # Step 1 starts the momentum buffers; step 2 (replayed from eager's state after step 1) uses them.
    loss, grads = train_step(eager, opt, x, t, seed=11)
    r1 = replay_step(g, m, (x,), t, seed=11)
    assert_same(r1, eager, opt, loss, grads)
    mid = copy.deepcopy(eager)
    mid_opt = torch.optim.SGD(mid.parameters(), lr=0.1, momentum=0.9)
    mid_opt.load_state_dict(copy.deepcopy(opt.state_dict()))   # load_state_dict keeps the tensors
    loss2, grads2 = train_step(eager, opt, x, t, seed=12)
    r2 = replay_step(g, mid, (x,), t, optimizer=mid_opt, seed=12)
    assert_same(r2, eager, opt, loss2, grads2)


def test_run_op_is_the_reusable_core(net: Net, adam_graph: Graph) -> None:
    x, t = make_batch()
    env, step = bind(adam_graph, net, (x,), t)
    assert step == 1
    op = adam_graph.ops[0]
    run_op(op, env, ReplayContext(), adam_graph)
    for tid in op.outputs:
        assert tuple(env[tid].shape) == tuple(adam_graph.tensor(tid).extra["shape"])
    with pytest.raises(HybridError, match="not available"):
        run_op(next(o for o in adam_graph.ops if o.extra["phase"] == "backward"), env)
    env2, _ = bind(adam_graph, net, (x,), t)
    run_graph(adam_graph, env2)
    assert all(tid in env2 for tid in adam_graph.extra["bindings"]["params"].values())


def test_tied_weights_are_one_tensor_with_summed_gradient() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(20, 8)
            self.mix = nn.Linear(8, 8)
            self.out = nn.Linear(8, 20, bias=False)
            self.out.weight = self.emb.weight

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(torch.tanh(self.mix(self.emb(x))))

    def loss(o: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(o.reshape(-1, 20), t.reshape(-1))

    torch.manual_seed(0)
    m = Tied()
    x, t = torch.randint(0, 20, (3, 5)), torch.randint(0, 20, (3, 5))
    g = capture(m, (x,), loss, t)
    assert set(g.extra["bindings"]["params"]) == {"emb.weight", "mix.weight", "mix.bias"}
    assert sum(t.bytes for t in g.tensors if t.kind == "param") == sum(p.numel() * 4 for p in m.parameters())
    eager = copy.deepcopy(m)
    reference = eager_step(eager, (x,), t, loss, optimizer=torch.optim.Adam(eager.parameters()), seed=0)
    assert mismatches(replay_step(g, m, (x,), t, seed=0), reference) == []


def test_mismatches_notices_a_different_dropout_mask(net: Net, adam_graph: Graph) -> None:
    x, t = make_batch()
    eager = copy.deepcopy(net)
    reference = eager_step(eager, (x,), t, F.cross_entropy, optimizer=torch.optim.Adam(eager.parameters(), lr=1e-2),
                           seed=1)
    different = mismatches(replay_step(adam_graph, net, (x,), t, seed=2), reference)
    assert "loss" in different and any(d.startswith("grads[") for d in different)


def test_in_place_ops_on_intermediates_write_new_versions() -> None:
    class InPlace(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(6, 6)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.fc(x)
            flat = y.view(-1)          # a view taken before the in-place ops must see them
            y.mul_(2.0)
            y[:, :3].add_(1.0)         # an in-place op through a view
            return torch.tanh(flat).sum()

    torch.manual_seed(0)
    m, x = InPlace(), torch.randn(4, 6)
    g = capture(m, (x,), optimizer="sgd", lr=0.1)
    versioned = [o for o in g.ops if "versions" in o.extra["aten"] and o.extra["phase"] == "forward"]
    assert [o.kind for o in versioned] == ["mul_", "add_"]
    for o in versioned:
        (new, old), = o.extra["aten"]["versions"].items()
        assert new in o.outputs and old in o.inputs and not o.updates
        assert g.tensor(new).bytes == g.tensor(old).bytes
    tanh = next(o for o in g.ops if o.kind == "tanh")
    assert tanh.inputs == (versioned[-1].outputs[0],)
    eager = copy.deepcopy(m)
    reference = eager_step(eager, (x,), None, None, optimizer=torch.optim.SGD(eager.parameters(), lr=0.1))
    assert mismatches(replay_step(g, m, (x,)), reference) == []
