"""`executor.execute` on what a new user's review found: a module with another state than the graph's refused
before the run, values present on one side only named as such by the check, an invalid plan refused as
`hybrid validate` refuses it, the pool's peak counted as the plan counts it (aligned) with what was allocated
outside the pool beside it, the sanitizer's count, workspace notes in readable units."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from hybrid.capture.api import capture  # noqa: E402
from hybrid.capture.interpreter import StepResult  # noqa: E402
from hybrid.errors import HybridError, InvalidPlanError  # noqa: E402
from hybrid.graph.liveness import occupied_bytes  # noqa: E402
from hybrid.swap.baselines import run_baseline  # noqa: E402
from hybrid.validator import validate  # noqa: E402

from executor import Executor, execute  # noqa: E402
from executor.check import EagerRun, compare  # noqa: E402

ITERS = 2


class CNN(nn.Module):
    """Convolution, batch norm, dropout; `extra` adds a layer the captured graph does not have, `width` changes
    the head's shape, `stats=False` drops batch norm's running statistics (buffers the graph binds)."""

    def __init__(self, extra: bool = False, width: int = 5, stats: bool = True) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = nn.BatchNorm2d(8, track_running_stats=stats)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(8, width)
        if extra:
            self.fc2 = nn.Linear(width, width)

    def forward(self, x: Any) -> Any:
        h = self.fc(self.drop(F.relu(self.b1(self.c1(x))).mean((2, 3))))
        return self.fc2(h) if hasattr(self, "fc2") else h


def _data() -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(4, 3, 8, 8, generator=g), torch.randint(5, (4,), generator=g)


def _module(**kw: Any) -> Any:
    torch.manual_seed(0)
    return CNN(**kw)


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    """The CNN captured with SGD (no stated copy workspaces: the copy fallback allocates beyond them) and a
    Belady plan at 60% of its unswapped peak."""
    from hybrid.graph.info import graph_alignment, largest_op, unswapped_peak

    x, y = _data()
    g = capture(_module(), (x,), F.cross_entropy, y, optimizer="sgd", lr=0.1)
    memory = max(largest_op(g, graph_alignment(g))[1] + 4096, int(0.6 * unswapped_peak(g)))
    return g, run_baseline(g, replace(g.device, memory_bytes=memory, reserve_bytes=0), "belady")


def _run(g: Any, plan: Any, m: Any, **kw: Any) -> Any:
    x, y = _data()
    return execute(g, plan, m, (x,), y, loss_fn=F.cross_entropy, iters=ITERS, device="cpu", **kw)


# ---- 1b. a module whose parameters or buffers are not the graph's: refused before anything is built --------

@pytest.mark.parametrize("kw, message", [
    ({"extra": True}, r"^the module does not match the graph: it has a parameter 'fc2\.weight' \(shape \[5, 5\]\) "
                      r"that the graph "
                      r"does not bind; run the module the graph was captured from, or capture it again$"),
    ({"width": 6}, r"^the module does not match the graph: its parameter 'fc\.weight' has shape \[6, 8\] but the "
                   r"graph recorded \[5, 8\]; "),
    ({"stats": False}, r"^the module does not match the graph: it has no buffer 'b1\.running_mean', which the "
                       r"graph binds; "),
])
def test_a_module_with_another_state_than_the_graphs_is_refused_in_one_line_before_the_run(
        tiny: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch, kw: dict, message: str) -> None:
    import executor.api

    g, plan = tiny

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("built the executor before checking the module")

    monkeypatch.setattr(executor.api, "Executor", never)
    with pytest.raises(HybridError, match=message) as e:
        _run(g, plan, _module(**kw), check=True)
    assert "\n" not in str(e.value)


def test_executor_load_checks_the_module_too(tiny: tuple[Any, Any]) -> None:
    g, plan = tiny
    ex = Executor(g, plan, "cpu")
    x, y = _data()
    with pytest.raises(HybridError, match=r"^the module does not match the graph: it has a parameter 'fc2\.weight'"):
        ex.load(_module(extra=True), (x,), y)
    ex.load(_module(), (x,), y)            # the module captured loads


# ---- 1c. names present on one side only are said as such, not as values that differ -----------------------

def test_the_check_names_values_present_on_one_side_only() -> None:
    a, b = torch.ones(3), torch.zeros(2)
    loss = torch.tensor(1.0)
    run = StepResult(loss, {}, {"w": a, "only_run": b}, {}, {}, [])
    eager = EagerRun([loss], StepResult(loss, {}, {"w": a.clone(), "extra.weight": b}, {}, {}, []))
    c = compare([loss], run, eager)
    assert c.only_eager == ["params[extra.weight]"] and c.only_run == ["params[only_run]"]
    assert c.mismatched == [] and c.beyond_tolerance == [] and c.max_abs_diff == 0
    assert not c.ok and not c.bitwise and c.values == 4 and c.both_sides == 2
    assert c.to_json()["only_eager"] == ["params[extra.weight]"]
    assert c.line() == ("check: 2 values on one side only (params[extra.weight] only in eager's; "
                        "params[only_run] only in the run's); the 2 values on both sides equal bitwise; "
                        "atol 0, rtol 0: MISMATCH")
    # a value that differs as well: counted among those on both sides
    eager.final.params["w"] = a + 1
    c = compare([loss], run, eager)
    assert c.mismatched == ["params[w]"] and c.worst == "params[w]" and c.max_abs_diff == 1
    assert "largest difference 1 (params[w]); 1 of 2 values on both sides differ" in c.line()


# ---- 2. an invalid plan: InvalidPlanError (exit 1), as `hybrid validate` ----------------------------------

def test_an_invalid_plan_is_refused_as_validate_refuses_it(tiny: tuple[Any, Any]) -> None:
    g, plan = tiny
    bad = replace(plan, makespan_s=plan.makespan_s + 1.0)
    with pytest.raises(InvalidPlanError, match=r"^the plan is not a valid plan for graph .*: rule 7: "):
        Executor(g, bad, "cpu")
    with pytest.raises(InvalidPlanError):
        _run(g, bad, _module())


# ---- 3. the pool's peak as the plan counts it, and what was allocated outside the pool beside it -----------

def test_the_pool_peak_is_counted_as_the_plan_counts_it_with_the_bytes_outside_beside_it(
        tiny: tuple[Any, Any]) -> None:
    g, plan = tiny
    align = 4096                   # large enough that rounding shows
    big = run_baseline(g, replace(plan.device, alignment_bytes=align,
                                  memory_bytes=int(occupied_bytes(g, align).sum()) + (1 << 20)), "belady")
    res = _run(g, big, _module())
    s, pool = res.summary, res.summary.memory["pool"]
    assert pool["alignment_bytes"] == align and pool["peak_occupied_bytes"] == s.pool_peak_occupied_bytes
    assert s.pool_peak_occupied_bytes % align == 0
    assert s.pool_peak_occupied_bytes > pool["peak_live_bytes"]          # each copy rounded up
    # the validator's peak counts copies the same way, plus the running op's workspace
    assert s.pool_peak_occupied_bytes <= validate(g, big).peak_bytes
    # on the CPU, per node: the pool's level plus what that node allocated outside the pool (the copy
    # fallback's results, beyond the graph's stated workspaces here)
    assert s.outside_counted_by == "dispatch" and s.outside_peak_bytes > 0
    assert s.pool_peak_occupied_bytes < s.peak_with_outside_bytes <= s.pool_peak_occupied_bytes + s.outside_peak_bytes
    # existing fields keep their meaning (tables read them)
    assert s.transient_peak_bytes > 0 and s.memory["pool"]["peak_live_bytes"] <= big.device.memory_bytes
    # uncounted: the pool's peak plus the copy fallback's largest result, an upper bound
    res = _run(g, big, _module(), count_outside=False)
    assert res.summary.peak_with_outside_bytes == (res.summary.pool_peak_occupied_bytes
                                                   + res.summary.transient_peak_bytes)


def test_a_cpu_run_over_its_plans_memory_with_what_it_allocated_outside_gets_one_warning() -> None:
    from executor.measure import Summary
    from executor.api import outside_warning

    kib = 1 << 10
    s = Summary(2, 1, 0.0, 0.0, 0.0, None, 1.0, outside_counted_by="dispatch", peak_with_outside_bytes=36 * kib,
                pool_peak_occupied_bytes=28 * kib, memory={"plan_memory_bytes": 30 * kib},
                peak_beyond_workspace_bytes=8 * kib)     # the peak's node allocated beyond its stated workspace
    line = outside_warning(s, 30 * kib)
    assert line is not None and "held 36 KiB, 6 KiB over the plan's 30 KiB" in line and "--executor-workspaces" in line
    assert "lay the plan out" not in line
    assert outside_warning(s, 36 * kib) is None                                      # within the plan's memory
    assert outside_warning(replace(s, memory={"cuda_own_peak_bytes": 1}), 30 * kib) is None   # CUDA: its own
    assert outside_warning(replace(s, outside_counted_by=""), 30 * kib) is None      # not counted: a bound only


def test_a_run_over_its_plans_memory_within_its_workspaces_is_advised_to_lay_the_plan_out() -> None:
    """Every node allocated outside the pool only what its op's workspace states (the graph captured with
    --executor-workspaces), yet the run held more than the plan: the executor's own layout of a plan without
    offsets left the workspace too little room. Capturing with --executor-workspaces again cannot help (it was
    advised); laying the plan out, --workspaces-aside or more memory can."""
    from executor.measure import Summary
    from executor.api import outside_warning

    kib = 1 << 10
    note = "offline; the largest workspace (8 KiB, outside the pool) may exceed the plan's memory by 6 KiB"
    s = Summary(2, 1, 0.0, 0.0, 0.0, None, 1.0, outside_counted_by="dispatch", peak_with_outside_bytes=36 * kib,
                pool_peak_occupied_bytes=28 * kib, memory={"plan_memory_bytes": 30 * kib, "pool": {"offsets": note}})
    line = outside_warning(s, 30 * kib)
    assert line is not None and "held 36 KiB, 6 KiB over the plan's 30 KiB usable" in line
    assert "--executor-workspaces" not in line and "no more than their ops' workspaces" in line
    assert "(the largest workspace (8 KiB, outside the pool) may exceed the plan's memory by 6 KiB)" in line
    assert "lay the plan out (hybrid arena --graph G --plan P" in line and "--workspaces-aside" in line
    # some beyond the workspaces, too little to explain the excess: both causes named
    both = outside_warning(replace(s, peak_beyond_workspace_bytes=2 * kib), 30 * kib)
    assert both is not None and "2 KiB of it was a node's beyond its op's workspace, which capturing with " \
        "--executor-workspaces plans for; for the rest, the executor's layout" in both and "lay the plan out" in both
    # nodes elsewhere in the iteration went beyond theirs (summed: 20 KiB), not the peak's: the layout's advice
    summed = outside_warning(replace(s, outside_beyond_workspace_bytes=20 * kib), 30 * kib)
    assert summed == line
    online = note.replace("offline", "online (best fit + compaction)")
    said = outside_warning(replace(s, memory={"pool": {"offsets": online}}), 30 * kib)
    assert said is not None and "(the largest workspace (8 KiB" in said and "online" not in said


# ---- 4. the sanitizer says what it checked; workspace notes in readable units ------------------------------

def test_sanitize_reports_the_nodes_it_checked(tiny: tuple[Any, Any]) -> None:
    g, plan = tiny
    res = _run(g, plan, _module(), sanitize=True)
    issued = sum(1 for e in plan.events if e.kind != "free")
    assert res.extra["sanitize"] == {"races": 0, "nodes_checked": ITERS * issued, "iterations": ITERS}
    assert "sanitize" not in _run(g, plan, _module()).extra
    text = repr(res)   # one line in a notebook (it printed the program and every interval)
    assert "\n" not in text and len(text) < 200 and text.startswith(f"ExecutionResult({ITERS} iterations, "), text


def test_the_workspace_note_of_an_unconstrained_pool_is_in_readable_units(tiny: tuple[Any, Any],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import executor.runtime as runtime
    from executor.ops import with_copy_workspaces
    from hybrid.errors import InfeasibleError

    g0, _ = tiny
    g = with_copy_workspaces(g0)            # the copy fallback's results stated as workspaces
    plan = run_baseline(g, replace(g.device, memory_bytes=int(occupied_bytes(g, g.device.alignment_bytes).sum())
                                   + (1 << 20), reserve_bytes=0), "belady")
    real = runtime.interval_offsets
    full = int(plan.device.usable_bytes)

    def tight(program: Any, capacity: int, align: int) -> Any:   # no layout beside the largest workspace
        if capacity < full:
            raise InfeasibleError("no room")
        return real(program, capacity, align)

    monkeypatch.setattr(runtime, "interval_offsets", tight)
    ex = Executor(g, plan, "cpu")
    note = ex.runtime.pool.stats.offsets
    assert note.startswith("offline; the largest workspace (") and "KiB, outside the pool)" in note, note
    assert " bytes" not in note


# ---- from the Python API review: the caller's random state, and a run over the plan's memory warned -------

def test_execute_leaves_the_callers_random_state_as_it_was(tiny: tuple[Any, Any]) -> None:
    """It seeds `seed + k` per iteration (and the reference too): in a notebook every later draw changed."""
    g, plan = tiny
    m = _module()       # seeds 0 itself
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    import warnings

    from executor.api import PlanMemoryWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PlanMemoryWarning)   # this plan's memory is tight: tested below
        _run(g, plan, m, check=True)
    assert torch.equal(torch.rand(3), expected)


def test_a_run_over_the_plans_memory_warns_from_python_as_the_command_prints() -> None:
    """The copy fallback's results (convolution and batch norm backward) are allocated outside the pool; with
    the plan's memory set just above its own pool peak the run holds more than the plan allows: warned."""
    import warnings

    from executor.api import PlanMemoryWarning

    x, y = _data()
    g = capture(_module(), (x,), F.cross_entropy, y, optimizer="sgd", lr=0.1)
    plan = run_baseline(g, replace(g.device, reserve_bytes=0), "belady")   # plenty of memory to plan with
    res = execute(g, plan, _module(), (x,), y, loss_fn=F.cross_entropy, iters=1, device="cpu")
    tight = replace(plan, device=replace(plan.device, memory_bytes=int(res.summary.pool_peak_occupied_bytes)))
    assert res.summary.peak_with_outside_bytes > 1.02 * tight.device.usable_bytes   # the run would hold more
    with pytest.warns(PlanMemoryWarning, match=r"over the plan's .* usable: capture with --executor-workspaces "
                                                r"\(executor\.ops\.with_copy_workspaces\(graph\) from Python"):
        execute(g, tight, _module(), (x,), y, loss_fn=F.cross_entropy, iters=1, device="cpu", validate=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlanMemoryWarning)
        execute(g, plan, _module(), (x,), y, loss_fn=F.cross_entropy, iters=1, device="cpu")   # within: silent


def test_an_executions_iterations_as_a_table(tiny: tuple[Any, Any]) -> None:
    import warnings

    from executor.api import PlanMemoryWarning

    g, plan = tiny
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PlanMemoryWarning)
        res = _run(g, plan, _module())
    df = res.iterations_frame()
    assert list(df["iteration"]) == [r.iteration for r in res.records] and len(df) == ITERS
    assert list(df["loss"]) == [r.loss for r in res.records] and (df["wall_s"] > 0).all()
    # the warm-up iteration is marked: the counted rows' median is the summary's (a user's median disagreed)
    assert list(df["counted"]) == [False] + [True] * (ITERS - 1)
    assert df[df["counted"]]["wall_s"].median() == res.summary.wall_s
    # the summary as one row, nested figures flattened: two runs side by side
    row = res.summary.frame()
    assert len(row) == 1 and row.loc[0, "wall_s"] == res.summary.wall_s
    assert row.loc[0, "memory.pool.peak_live_bytes"] == res.summary.memory["pool"]["peak_live_bytes"]
    assert row.loc[0, "busy_s.compute"] == res.summary.busy_s["compute"]
    assert not any(isinstance(v, (dict, list)) for v in row.iloc[0])   # flat: every cell a figure
    import pandas as pd

    both = pd.concat([row, res.summary.frame()], ignore_index=True)
    assert len(both) == 2 and list(both.columns) == list(row.columns)


# ---- a check's mismatch warned from Python; the reference binds the batch and state as the run does ----------

def _mlp() -> Any:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _mlp_run(dtype: str | None, x: Any, loss_fn: Any = F.cross_entropy) -> Any:
    import warnings

    from executor.api import PlanMemoryWarning
    from hybrid.swap.quick_plans import quick_plan

    y = torch.randint(4, (5,), generator=torch.Generator().manual_seed(2))
    g = capture(_mlp(), (torch.randn(5, 8),), F.cross_entropy, y, dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PlanMemoryWarning)
        return execute(g, quick_plan(g, 0.6), _mlp(), (x,), y, loss_fn=loss_fn, iters=ITERS, check=True)


def test_a_check_that_finds_a_mismatch_warns_with_its_line() -> None:
    from executor import CheckMismatchWarning

    # the line, and why (the notes `hybrid execute --check` prints under it): the first loss differs already
    with pytest.warns(CheckMismatchWarning, match=r"^check: largest difference .* \(loss\[0\]\); .*: MISMATCH; "
                                                  r"the first iteration's loss already differs.* is loss_fn that one"):
        r = _mlp_run(None, torch.randn(5, 8), loss_fn=lambda o, t: 2 * F.cross_entropy(o, t))
    assert not r.comparison.ok


def test_a_bitwise_mismatch_after_the_first_loss_says_eager_may_not_repeat_itself(monkeypatch) -> None:
    """Eager training on the CPU is not always bitwise reproducible across processes (results/
    eager_reproducibility.md); a check that differs by a rounding once said MISMATCH with nothing to weigh it
    (helper-128 saw one in 7 runs). An eager parameter nudged by one step of float32 stands for that here."""
    import warnings

    import executor.api as api
    from executor import CheckMismatchWarning

    real = api.train_eager
    by = [0.0]     # 0: one float32 step; else this much (no rounding's size)

    def nudged(graph, module, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        run = real(graph, module, *args, **kwargs)
        with torch.no_grad():
            p = next(module.parameters()).view(-1)
            p[0] = torch.nextafter(p[0], p[0] + 1) if not by[0] else p[0] + by[0]
        return run

    monkeypatch.setattr(api, "train_eager", nudged)
    for by[0] in (0.0, 1.0):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CheckMismatchWarning)
            r = _mlp_run(None, torch.randn(5, 8))
        assert not r.comparison.ok and "loss[0]" not in r.comparison.beyond_tolerance
        said = any(n.startswith("eager training on the CPU is not always") for n in r.comparison.notes)
        assert said == (by[0] == 0.0), r.comparison.notes
    # a first loss apart has its own note, not this one
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckMismatchWarning)
        r = _mlp_run(None, torch.randn(5, 8), loss_fn=lambda o, t: 2 * F.cross_entropy(o, t))
    assert not any(n.startswith("eager training on the CPU") for n in r.comparison.notes)


@pytest.mark.parametrize("dtype, batch_dtype", [(None, torch.float64), (None, torch.float16),
                                                ("bf16", torch.float32)])
def test_the_reference_trains_on_the_dtypes_the_run_binds(dtype: str | None, batch_dtype: Any) -> None:
    """float64 data (from NumPy, say) is cast to the graph's float32 by the run; a graph captured in bf16 from an
    fp32 module trains bf16 parameters: the eager reference gets the same numbers (it raised a dtype error, or
    reported the first loss as a mismatch)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = _mlp_run(dtype, torch.randn(5, 8).to(batch_dtype))
    assert r.comparison.bitwise
    assert any("cast as the run binds it (4 values" in n for n in r.comparison.notes) == (dtype == "bf16")


def test_a_buffer_shared_by_two_submodules_is_cast_for_both_owners() -> None:
    """named_buffers() names a shared buffer once: its second owner kept fp32 in the reference and the check
    reported a mismatch the run did not make (review helper-97)."""
    import warnings

    from hybrid.swap.quick_plans import quick_plan

    class Scale(nn.Module):
        def __init__(self, s: Any) -> None:
            super().__init__()
            self.register_buffer("scale", s)
            self.lin = nn.Linear(8, 8)

        def forward(self, x: Any) -> Any:
            return self.lin(x) * self.scale

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            s = torch.full((8,), 0.5)
            self.a, self.b, self.head = Scale(s), Scale(s), nn.Linear(8, 4)

        def forward(self, x: Any) -> Any:
            return self.head(self.b(torch.relu(self.a(x))))

    def make() -> Net:
        torch.manual_seed(0)
        return Net()

    x, y = torch.randn(5, 8), torch.randint(4, (5,), generator=torch.Generator().manual_seed(3))
    g = capture(make(), (x,), F.cross_entropy, y, dtype="bf16")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the plan's memory: not what is tested
        r = execute(g, quick_plan(g, 1.0, "unconstrained"), make(), (x,), y, loss_fn=F.cross_entropy, iters=2,
                    check=True)
    assert r.comparison.bitwise, r.comparison.line()
