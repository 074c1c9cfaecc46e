"""Random ops whose reruns draw what their first runs drew, graph-safe (executor.random_state): a plan that
recomputes dropout trains bitwise like eager (replay) and like the same step without reruns (op_seeds)."""
from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from executor.api import Executor  # noqa: E402
from executor.check import compare  # noqa: E402
from executor.random_state import OpSeeds, op_seed  # noqa: E402
from hybrid.graph.info import unswapped_peak  # noqa: E402
from hybrid.graph.order import program_order  # noqa: E402
from hybrid.swap.augmented import PlannerOptions  # noqa: E402
from hybrid.swap.planner import SwapPlanner  # noqa: E402
from hybrid.swap.pools import byte_pool  # noqa: E402
from hybrid.swap.to_plan import to_plan  # noqa: E402
from hybrid.validator import validate  # noqa: E402

from tests.executor.cases import ITERS, SEED, Case  # noqa: E402

import copy  # noqa: E402

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from executor.check import train_eager  # noqa: E402
from hybrid.capture.api import capture  # noqa: E402

pytestmark = pytest.mark.torch


def _plan(case: Case, fraction: float, recompute: bool):  # noqa: ANN202
    g = case.graph
    dev = replace(g.device, memory_bytes=int(unswapped_peak(g) * fraction), reserve_bytes=0)
    opts = PlannerOptions(recompute_ratio=1e6 if recompute else 0.0)
    plan = to_plan(SwapPlanner(g, dev).plan(program_order(g), byte_pool(g, dev), opts), {"name": "test"})
    assert validate(g, plan).valid
    return plan


def _train(case: Case, plan, random: str) -> Executor:  # noqa: ANN001
    ex = Executor(case.graph, plan, "cpu", random=random)
    ex.keep_grads()
    ex.load(case.module(), case.args, case.target)
    ex.run(ITERS, seed=SEED)
    return ex


def _reruns_dropout(case: Case, plan) -> bool:  # noqa: ANN001
    return any(e.kind == "compute" and e.recompute and case.graph.op(e.op).kind.startswith("bernoulli")
               for e in plan.events)


class MaskNet(nn.Module):
    """Dropout written out (a mask drawn with torch.bernoulli from its own probabilities), which a plan reruns
    in the backward pass instead of keeping the mask."""

    def __init__(self, width: int = 32, depth: int = 4) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.head = nn.Linear(width, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            h = torch.tanh(layer(x))
            x = h * torch.bernoulli(torch.full_like(h, 0.8)) / 0.8
        return self.head(x)


def mask_case() -> Case:
    torch.manual_seed(0)
    base = MaskNet()
    x, y = torch.randn(16, 32), torch.randint(5, (16,))
    g = capture(base, (x,), F.cross_entropy, y, optimizer="sgd", lr=0.1, name="masknet")
    case = Case("masknet", g, lambda: copy.deepcopy(base), (x,), y, F.cross_entropy)
    case.eager = train_eager(g, case.build(), case.args, case.target, F.cross_entropy, ITERS, SEED)
    return case


def test_a_plan_that_recomputes_dropout_trains_like_eager_and_like_no_reruns() -> None:
    case = mask_case()
    plan = _plan(case, 0.5, recompute=True)
    assert _reruns_dropout(case, plan), "the plan does not rerun a dropout op"
    # replay (the CPU's default): eager's numbers, bitwise
    ex = _train(case, plan, "replay")
    cmp = compare(ex.losses, ex.state(), case.reference(), grads=True)
    assert cmp.bitwise, (cmp.mismatched[:5], cmp.max_abs_diff)
    # op seeds (graph-safe): the numbers depend on the step and the op only, so a rerun draws the first run's
    # mask and the step equals the same step under a plan that reruns nothing
    seeded = _train(case, plan, "op_seeds")
    plain = _train(case, _plan(case, 1.0, recompute=False), "op_seeds")
    st, ref = seeded.state(), plain.state()
    assert [float(x) for x in seeded.losses] == [float(x) for x in plain.losses]
    for n in ref.params:
        assert torch.equal(st.params[n], ref.params[n]), n
    for n in ref.grads:
        assert torch.equal(st.grads[n], ref.grads[n]), n
    # and they are not eager's numbers (another seed per op): the comparison can fail
    assert [float(x) for x in seeded.losses] != [float(x) for x in ex.losses]


def test_op_seeds_differ_by_op_and_step_and_repeat() -> None:
    seeds = {op_seed(s, o) for s in range(50) for o in range(50)}
    assert len(seeds) == 2500 and all(0 <= v < 2**63 for v in seeds)
    assert op_seed(7, 3) == op_seed(7, 3)


class FakeState:
    """A CUDA generator state's stand-in: a seed and an offset each draw advances."""

    def __init__(self, seed: int = 0, offset: int = 0) -> None:
        self.seed, self.offset = seed, offset

    def manual_seed(self, seed: int) -> None:
        self.seed, self.offset = seed, 0


class FakeGenerator:
    """The graph-safe API of a CUDA generator: clone_state, graphsafe_get_state / graphsafe_set_state."""

    def __init__(self) -> None:
        self.state = FakeState(123, 40)

    def clone_state(self) -> FakeState:
        return FakeState(self.state.seed, self.state.offset)

    def graphsafe_get_state(self) -> FakeState:
        return self.state

    def graphsafe_set_state(self, state: FakeState) -> None:
        self.state = state

    def draw(self) -> tuple[int, int]:
        self.state.offset += 4
        return self.state.seed, self.state.offset


class FakeGraph:
    def __init__(self) -> None:
        self.registered: list[FakeState] = []

    def register_generator_state(self, state: FakeState) -> None:
        self.registered.append(state)


def test_graph_safe_states_give_each_run_of_an_op_the_same_numbers_and_restore_the_default() -> None:
    gen = FakeGenerator()
    src = OpSeeds(torch.device("cpu"), {5: 3, 9: 1}, generator=gen)
    graph = FakeGraph()
    src.register(graph)
    assert len(graph.registered) == 4 and len({id(s) for s in graph.registered}) == 4
    default = gen.state
    draws: dict[int, list] = {5: [], 9: []}
    for step in (11, 12):
        src.begin_iteration(step)
        src.start()
        for o in (5, 9, 5, 5):     # op 5's first run, op 9, then op 5's two reruns
            with src.run(o, rerun=bool(draws[o]) and draws[o][-1][0] == step, name=f"op{o}"):
                assert gen.state is not default
                draws[o].append((step, gen.draw()))
            assert gen.state is default          # the default generator's own state is back after each run
    assert default.offset == 40                  # and it never drew
    for o in (5, 9):
        by_step = {}
        for step, d in draws[o]:
            by_step.setdefault(step, set()).add(d)
        assert all(len(v) == 1 for v in by_step.values())      # every run of the op in a step: the same numbers
        assert by_step[11] != by_step[12]                        # another step: other numbers
    assert draws[5][0][1] != draws[9][0][1]                      # another op: other numbers
    with pytest.raises(Exception, match="ran 4 times"):
        src.start()
        for _ in range(4):
            with src.run(5, rerun=True, name="op5"):
                pass
