"""Perfect packings (`hybrid.arena.packings`): the generator's output tiles its strip, and the exact search finds
the known optimum on small ones."""
from __future__ import annotations

import numpy as np
import pytest

from hybrid.arena import exact
from hybrid.arena.packings import KINDS, perfect_packing
from hybrid.arena.problem import Buffer, Problem
from hybrid.arena.validate import check_offsets


def _tiles(pk) -> bool:  # noqa: ANN001 - a Packing
    """Every (time, byte) cell of the strip covered exactly once: count the cover on a grid of the cut points."""
    p = pk.problem
    a = p.arrays
    ts = np.unique(np.concatenate([a.seg_lo, a.seg_hi]))
    os_ = np.unique(np.concatenate([pk.offsets, pk.offsets + a.size, [0, pk.capacity]]))
    cover = np.zeros((len(ts) - 1, len(os_) - 1), np.int64)
    for b in range(len(p)):
        t0, t1 = np.searchsorted(ts, [a.seg_lo[b], a.seg_hi[b]])
        o0, o1 = np.searchsorted(os_, [pk.offsets[b], pk.offsets[b] + a.size[b]])
        cover[t0:t1, o0:o1] += 1
    return ts[0] == 0 and os_[-1] == pk.capacity and bool(np.all(cover == 1))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [1, 2, 5, 40, 150])
@pytest.mark.parametrize("seed", range(4))
def test_packing_tiles_the_strip(kind: str, n: int, seed: int) -> None:
    pk = perfect_packing(n, seed, kind, capacity=1 << 16, grain=16)
    p = pk.problem
    assert len(p) == n
    assert _tiles(pk)
    assert p.peak_live() == pk.capacity                     # every instant is full: the optimum is the capacity
    assert check_offsets(p, pk.offsets, capacity=pk.capacity).valid
    assert np.all(p.arrays.size % 16 == 0)


def test_packings_are_deterministic_and_differ_by_seed() -> None:
    a, b, c = perfect_packing(60, 3), perfect_packing(60, 3), perfect_packing(60, 4)
    assert a.problem.buffers == b.problem.buffers and np.array_equal(a.offsets, b.offsets)
    assert a.problem.buffers != c.problem.buffers


def test_mixed_packings_are_not_guillotine() -> None:
    """A mixed tiling holds a pinwheel somewhere: at some level no straight cut separates its pieces. Checked on
    the whole strip: a guillotine tiling has a full-height time cut or a full-width byte cut at every level;
    a single pinwheel (n = 5, one split) has neither."""
    for seed in range(50):
        pk = perfect_packing(5, seed, "mixed", capacity=1 << 12, grain=16)
        a = pk.problem.arrays
        lo, hi, off, top = a.seg_lo, a.seg_hi, pk.offsets, pk.offsets + a.size
        t_cut = any(np.all((hi <= t) | (lo >= t)) for t in np.unique(lo)[1:])
        o_cut = any(np.all((top <= o) | (off >= o)) for o in np.unique(off)[1:])
        if not t_cut and not o_cut:
            return
    pytest.fail("no pinwheel among 50 mixed 5-piece packings")


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="kind"):
        perfect_packing(10, 0, "spiral")
    with pytest.raises(ValueError, match="grain"):
        perfect_packing(10, 0, capacity=1000, grain=64)
    with pytest.raises(ValueError, match="horizon"):
        perfect_packing(50, 0, horizon=2, capacity=64, grain=64)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(6))
def test_exact_search_reaches_the_known_optimum(kind: str, seed: int) -> None:
    """Small packings (12-30 buffers): the search finds an assignment at the capacity, proven optimal, whatever
    the heuristics' start; asking for one byte less is proven infeasible (the peak is the capacity)."""
    n = 12 + 3 * seed
    pk = perfect_packing(n, seed, kind, capacity=1 << 14, grain=16)
    p = pk.problem
    s = exact.solve(p, 60.0)
    assert s.lower_bound == pk.capacity
    assert check_offsets(p, s.offsets, capacity=pk.capacity).valid
    assert s.arena_bytes == pk.capacity and s.proven_optimal
    out = exact.decide(p, pk.capacity, np.inf)
    assert out.status == exact.FOUND
    assert check_offsets(p, out.offsets, capacity=pk.capacity).valid
    assert exact.decide(p, pk.capacity - 1, np.inf).status == exact.INFEASIBLE


@pytest.mark.parametrize("kind", KINDS)
def test_zero_slack_search_alone_finds_the_packing(kind: str) -> None:
    """decide with no preordering runs only the zero-slack search (every section is full at the capacity)."""
    for seed in range(8):
        pk = perfect_packing(60, seed, kind, capacity=1 << 16, grain=16)
        out = exact.decide(pk.problem, pk.capacity, np.inf, orders=())
        assert out.status == exact.FOUND
        assert check_offsets(pk.problem, out.offsets, capacity=pk.capacity).valid


def test_zero_slack_search_proves_infeasibility_and_needs_zero_slack() -> None:
    """Both buffers need an even offset: the 3-byte one at 0 leaves byte 3 for the 1-byte one, which is odd."""
    p = Problem([Buffer("a", 0, 1, 1, 2), Buffer("b", 0, 1, 3, 2)])
    assert exact.decide(p, 4, np.inf, orders=()).status == exact.INFEASIBLE
    assert exact.decide(p, 4, np.inf).status == exact.INFEASIBLE          # the round robin agrees
    assert exact.decide(p, 6, np.inf).status == exact.FOUND
    with pytest.raises(ValueError, match="slack"):
        exact.decide(p, 6, np.inf, orders=())


@pytest.mark.parametrize("seed", range(6))
def test_lowest_fill_is_valid(seed: int) -> None:
    """The lowest-cell heuristic is valid on random instances (gaps, alignment) and on perfect packings."""
    from hybrid.arena.heuristics import best_fit, lowest_fill
    from tests.arena.instances import random_problem

    p = random_problem(seed, 60, 1 + seed % 3 * 4, gaps=seed % 2 == 1)
    s = lowest_fill(p)
    assert check_offsets(p, s.offsets).valid and s.arena_bytes >= p.peak_live()
    pk = perfect_packing(150, seed, KINDS[seed % 2])
    lf = lowest_fill(pk.problem)
    assert check_offsets(pk.problem, lf.offsets).valid
    assert lf.arena_bytes >= pk.capacity
    assert best_fit(pk.problem).arena_bytes > pk.capacity       # the packings are not trivial for best fit


def test_lowest_fill_reaches_a_guillotine_stack() -> None:
    """Three buffers stacked over [0, 4) and two after them: the lowest cell is filled widest first, exactly."""
    p = Problem([Buffer("a", 0, 4, 2), Buffer("b", 0, 2, 3), Buffer("c", 2, 4, 1), Buffer("d", 2, 4, 2),
                 Buffer("e", 0, 2, 0)])
    from hybrid.arena.heuristics import lowest_fill

    s = lowest_fill(p)
    assert check_offsets(p, s.offsets).valid
    assert s.arena_bytes == 5 == p.peak_live()
