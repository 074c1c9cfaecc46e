"""The memory rows' bound (`milp.model.budget_bytes`): the solver's tolerance must not buy a plan over the device.

Rows count MiB; HiGHS lets a row miss by 1e-6 of a unit (about a byte), so with the usable bytes as the bound a
plan one byte over them was solved, then refused by decode. Where every byte count is a multiple of the
alignment the bound sits between multiples (the same integral plans, with room for the tolerance); where the
counts are finer it is the usable bytes less the tolerance."""
from __future__ import annotations


import pytest

from hybrid.device import Device
from hybrid.graph import Graph, Op, Tensor
from hybrid.validator import validate
from milp.decode import decode
from milp.model import ModelOptions, budget_bytes
from milp.stages import build_problem
from tests.milp.test_model import _solve

KiB = 1 << 10


def _chain(sizes: list[int], align: int, memory: int) -> Graph:
    tensors = [Tensor("x", sizes[0], "input", True)] + [Tensor(f"t{i}", b) for i, b in enumerate(sizes[1:])]
    ops = [Op(f"o{i}", "relu", (tensors[i].id,), (tensors[i + 1].id,), 1e-3) for i in range(len(sizes) - 1)]
    return Graph("chain", tensors, ops, Device("d", memory, 8e9, 8e9, 0.0, alignment_bytes=align))


@pytest.mark.parametrize("extra, expect", [(0, 0), (100, 100), (128, 128), (129, 128), (255, 128)])
def test_aligned_counts_bound_between_multiples(extra: int, expect: int) -> None:
    """Usable = 12,544 + extra; every count a multiple of 256 (their gcd): the bound is the usable bytes while
    they are at most half of 256 over a multiple, else that multiple plus 128: the same plans fit either way."""
    g = _chain([4096, 4352, 4096], 256, 12544 + extra)
    pb = build_problem(g, g.device)
    assert budget_bytes(pb, 3) == 12544 + expect


def test_counts_coarser_than_the_slop_but_not_by_4x_bound_at_their_multiple() -> None:
    """q = 256 and a 60-equation chain (slop about 65 B): the usable bytes rounded down to 256, which admits the
    same plans (it took the slop off the usable bytes: a plan needing exactly the rounded bytes was lost)."""
    g = _chain([4096, 4352, 4096], 256, 12544 + 100)
    pb = build_problem(g, g.device)
    assert budget_bytes(pb, 60) == 12544


def test_fine_counts_take_the_tolerance_off_the_usable_bytes() -> None:
    g = _chain([4001, 4003, 4007], 1, 12011)
    pb = build_problem(g, g.device)
    b = budget_bytes(pb, 3)
    assert 12011 - 10 < b < 12011   # a few bytes: 1e-6 MiB per row of the chain plus 1e-6 of the bytes counted


@pytest.mark.parametrize("under", [0, 1])
def test_a_plan_that_needs_the_aligned_peak_fits_it_and_not_a_byte_less(under: int) -> None:
    """x -> t0 -> t1 needs x + t0 + t1 = 12 KiB at o1 whatever the plan (recompute only): at 12 KiB the model
    solves and its plan validates; a byte less is infeasible, not a plan a byte over."""
    g = _chain([4 * KiB, 4 * KiB, 4 * KiB], 256, 12 * KiB - under)
    m, r = _solve(g, g.device, ModelOptions(offload=False))
    if under:
        assert r.status == "infeasible"
    else:
        assert r.status == "optimal"
        assert validate(g, decode(m, r.values)).valid
