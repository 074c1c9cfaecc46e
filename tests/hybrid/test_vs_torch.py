"""benchmarks/vs_torch's simulated path on a tiny model (CI speed): the checkpointed step is captured as a
graph, timed at its own peak, and hybrid plans the plain graph at exactly that peak."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.vs_torch import NOT_CAPTURED, Model, _is_class, checkpoint_blocks, graphs, simulated_rows  # noqa: E402
from hybrid.graph.info import unswapped_peak  # noqa: E402
from tests.hybrid.checkpointed_models import Checkpointed, MLPBlock  # noqa: E402

pytestmark = pytest.mark.torch


def tiny() -> tuple[nn.Module, tuple, torch.Tensor, object]:
    torch.manual_seed(0)
    m = Checkpointed(nn.Linear(32, 128), [MLPBlock(128) for _ in range(4)], nn.Linear(128, 10), "none")
    return m, (torch.randn(256, 32),), torch.randint(10, (256,)), F.cross_entropy


def test_checkpointed_graph_is_timed_beside_hybrid_at_its_peak() -> None:
    model = Model("tiny-mlp", tiny, lambda m: checkpoint_blocks(m, _is_class("MLPBlock")))
    plain, ck = graphs(model)
    assert sum(o.kind == "addmm" for o in ck.ops) > sum(o.kind == "addmm" for o in plain.ops)   # recomputation
    assert unswapped_peak(ck) < unswapped_peak(plain)
    rows = simulated_rows("tiny-mlp", plain, ck, seconds=20, generations=2, bound_s=2)
    by = {r["alternative"]: r for r in rows}
    assert set(by) == {"eager", "checkpoint", *NOT_CAPTURED}
    eager, cp = by["eager"], by["checkpoint"]
    assert cp["peak_MiB"] < eager["peak_MiB"] and cp["time_ms"] > eager["time_ms"]   # memory for time
    assert cp["hybrid_ms"] >= eager["time_ms"] * (1 - 1e-9)       # no plan beats the unconstrained step
    assert cp["speedup"] == pytest.approx(cp["time_ms"] / cp["hybrid_ms"])
    assert cp["hybrid_variant"] and eager["hybrid_ms"] != eager["hybrid_ms"]    # the reference: no plan
    assert eager["time_ms"] * (1 - 1e-9) <= cp["bound_ms"] <= cp["hybrid_ms"] * (1 + 1e-9)   # a bound on hybrid too
    assert cp["ceiling"] == pytest.approx(cp["time_ms"] / cp["bound_ms"]) and cp["ceiling"] >= cp["speedup"]
    assert all(by[a]["note"].startswith("not simulated") for a in NOT_CAPTURED)


def test_hugging_face_rows_are_checkpointed_per_decoder_block() -> None:
    """gpt2 and llama (the optional `transformers` extra): each block's recomputation is captured."""
    pytest.importorskip("transformers")
    from benchmarks.vs_torch import models

    quick = {m.name: m for m in models(True, smoke=True)}
    for name, fwd, per_block in (("gpt2", "addmm", 4), ("llama", "mm", 6)):
        plain, ck = graphs(quick[name])
        draws = sum(o.kind == "save_state" for o in ck.ops)
        assert draws > 0 if name == "gpt2" else draws == 0   # gpt2's dropout: the forward's generator state
        # every projection reruns but llama's last (down_proj: nothing saves its output, and non-reentrant
        # checkpointing stops once the saved tensors are back); 2 blocks in the quick models
        extra = sum(o.kind == fwd for o in ck.ops) - sum(o.kind == fwd for o in plain.ops)
        assert extra == 2 * per_block
        assert unswapped_peak(ck) < unswapped_peak(plain)


def test_variants_search_with_hybrid_optimizes_own_planner() -> None:
    """hybrid's rows are `hybrid optimize`'s planner (long rerun chains, reruns re-bound in time order: both off in
    PlannerOptions' defaults), recomputing, and one variant recompute only."""
    from benchmarks.vs_torch import VARIANTS, variant_options
    from hybrid.pipeline import OptimizeOptions

    default = OptimizeOptions().planner_options()
    assert default.long_chains and default.rebind_reruns and default.recomputes
    opts = {name: variant_options(name).planner for name in VARIANTS}
    assert opts["swap+recompute"] == default
    assert opts["recompute-only"].recompute_only and opts["recompute-only"].rebind_reruns


def test_measured_path_plans_hybrid_at_each_peak_and_runs_it() -> None:
    """The GPU path's code on the CPU (smoke: the graphs' peaks stand in for measured ones): eager and checkpoint
    run, hybrid is planned at both peaks, laid out, and executed without compaction; the rest say why not."""
    from benchmarks.vs_torch_measured import ALTERNATIVES, CPU_ALTERNATIVES, measured_rows, summary

    model = Model("tiny-mlp", tiny, lambda m: checkpoint_blocks(m, _is_class("MLPBlock")))
    plain, ck = graphs(model)
    rows = measured_rows(model, plain, ck, torch.device("cpu"), iters=2, seconds=30, log=lambda _: None,
                         generations=2)
    by = {r["alternative"]: r for r in rows}
    assert set(by) == set(ALTERNATIVES)
    for alt in CPU_ALTERNATIVES:
        r = by[alt]
        assert r["measured_ms"] > 0 and r["hybrid_ms"] > 0 and r["hybrid_simulated_ms"] > 0
        assert r["hybrid_plan_MiB"] == pytest.approx(unswapped_peak(plain if alt == "eager" else ck) / 2**20)
        assert r["hybrid_pool"] in ("arena", "size_classes") and r["hybrid_compactions"] == 0
        assert r["speedup"] == pytest.approx(r["measured_ms"] / r["hybrid_ms"])
    assert all(by[a]["note"].startswith("not run") for a in ALTERNATIVES if a not in CPU_ALTERNATIVES)
    assert "of 1 models" in summary(rows)


def test_a_measured_peak_within_the_reserve_is_noted_not_fatal() -> None:
    """A GPU's reserve (cuBLAS's kept bytes) at least an alternative's measured peak leaves hybrid nothing to plan
    there: that row says so, and the model's other rows are still planned."""
    from benchmarks.vs_torch_measured import peak_devices

    link = {"h2d_bytes_per_s": 2e10, "d2h_bytes_per_s": 2e10, "latency_s": 1e-5}
    rows = [{"alternative": "eager", "measured_peak_MiB": 64.0},
            {"alternative": "checkpoint", "measured_peak_MiB": 8.0}]
    kept, devices = peak_devices(rows, "h100-80gb-measured", link, reserve=8 << 20, log=lambda _: None)
    assert [r["alternative"] for r in kept] == ["eager"] and devices[0].memory_bytes == 64 << 20
    assert devices[0].reserve_bytes == 8 << 20
    assert rows[1]["hybrid_note"].startswith("not planned: HybridError:") and "reserve" in rows[1]["hybrid_note"]


def test_of_a_devices_two_plans_the_fastest_laid_out_one_is_kept() -> None:
    # plan_all plans a graph with workspaces twice (counted while their ops run, and the largest held aside):
    # a plan written without offsets loses to any laid-out one, else the faster wins, and the row says the other
    from types import SimpleNamespace as NS

    from benchmarks.vs_torch_measured import _best

    def plan(ms: float, kind: str, aside: bool) -> NS:
        return NS(makespan_s=ms / 1e3, allocation=NS(kind=kind), planner={"workspaces_aside": 1} if aside else {})

    unlaid, slow, fast = plan(20.0, "unconstrained", False), plan(40.0, "arena", True), plan(30.0, "arena", False)
    best, skipped, error = _best([(unlaid, [], ""), (slow, ["x"], "")])
    assert best is slow and skipped[0] == "x" and "byte budget: 20.00 ms (unconstrained)" in skipped[-1]
    assert _best([(fast, [], ""), (slow, [], "")])[0] is fast
    assert _best([(None, [], "no"), (slow, [], "")])[0] is slow
    assert _best([(None, [], "no"), (None, [], "nor")]) == (None, [], "no")


def test_the_replays_summary_reads_the_targets_against_the_ceilings() -> None:
    from benchmarks.vs_torch_replay import summary

    rows = [{"model": "a", "alternative": "eager", "alternative_ms": 10.0, "ceiling": 0.97, "replay_speedup": 0.9},
            {"model": "a", "alternative": "checkpoint", "alternative_ms": 20.0, "ceiling": 1.3, "replay_speedup": 1.2},
            {"model": "a", "alternative": "save_on_cpu", "alternative_ms": 90.0, "ceiling": 5.0,
             "replay_speedup": 4.0},
            {"model": "b", "alternative": "checkpoint", "alternative_ms": 20.0, "ceiling": 1.05,
             "replay_speedup": 1.0}]
    text = summary(rows)
    assert "ceiling is >= 1.10x on 1 of 2 models and the replayed plan >= 1.10x on 1" in text
    assert "ceiling is at worst 0.970x and the replayed plan 0.900x eager's speed" in text
