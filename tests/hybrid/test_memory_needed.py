"""`hybrid.validator.memory_needed` is the least memory at which a plan validates: every planner's plan, on random
graphs, validates on a device of exactly that memory and not one byte less (rule 5 refuses it there). What the
frontier places a plan at; an arena plan needs its arena and the largest workspace, more than its live peak."""
from __future__ import annotations

import dataclasses
import random
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.graph.info import unswapped_peak
from hybrid.validator import memory_needed, validate

sys.path.insert(0, str(Path(__file__).parent))
from test_zero_time_planners import PLANNERS, _plan  # noqa: E402
from validator_plans import random_graph  # noqa: E402


def _at(plan, usable: int):  # noqa: ANN001, ANN202
    return dataclasses.replace(plan, device=dataclasses.replace(plan.device,
                                                                memory_bytes=usable + plan.device.reserve_bytes))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), fraction=st.sampled_from([0.5, 0.75, 1.0]))
def test_a_plan_validates_at_the_memory_it_needs_and_not_a_byte_less(seed: int, fraction: float) -> None:
    rng = random.Random(seed)
    g = random_graph(rng, rng.randint(3, 12))
    dev = Device("t", max(int(unswapped_peak(g) * fraction), 4096), 8e9, 8e9, 0.0)
    for name in PLANNERS:
        try:
            plan = _plan(g, dev, name)
        except HybridError:
            continue
        need = memory_needed(g, plan)
        assert need <= dev.usable_bytes, (seed, name)
        assert validate(g, _at(plan, need)).valid, (seed, fraction, name, need)
        if need > 1:
            short = validate(g, _at(plan, need - 1))
            assert not short.valid and short.violations[0].rule == 5, (seed, fraction, name, short.violations)
        if plan.allocation.kind == "unconstrained":
            assert need == validate(g, plan).peak_bytes
