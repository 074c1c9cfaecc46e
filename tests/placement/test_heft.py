"""HEFT on the classic example of Topcuoglu, Hariri and Wu (2002), Fig. 2: 10 tasks, 3 processors."""
from __future__ import annotations

import numpy as np
import pytest

from hybrid.placement.heft import TaskGraph, heft, upward_ranks

W = np.array([[14, 16, 9], [13, 19, 18], [11, 13, 19], [13, 8, 17], [12, 13, 10],
              [13, 16, 9], [7, 15, 11], [5, 11, 14], [18, 12, 20], [21, 7, 16]], dtype=float)
EDGES = {(0, 1): 18, (0, 2): 12, (0, 3): 9, (0, 4): 11, (0, 5): 14, (1, 7): 19, (1, 8): 16, (2, 6): 23,
         (3, 7): 27, (3, 8): 23, (4, 8): 13, (5, 7): 15, (6, 9): 17, (7, 9): 11, (8, 9): 13}


def test_the_papers_example_has_makespan_80():
    g = TaskGraph(W, {k: float(v) for k, v in EDGES.items()})
    rank = upward_ranks(g)
    # the paper's Table 1 (rounded): n1 108, n3 80, n4 80, n2 77, n5 69, n6 63.3, n9 44.3, n7 42.7, n8 35.7, n10 14.7
    assert rank == pytest.approx([108.0, 77.0, 80.0, 80.0, 69.0, 63.333, 42.667, 35.667, 44.333, 14.667], abs=1e-3)
    s = heft(g)
    assert s.makespan == pytest.approx(80.0)
    # every task starts after its predecessors' results arrive, and no processor runs two tasks at once
    for (a, b), c in EDGES.items():
        assert s.start[b] >= s.finish[a] + (0 if s.proc[a] == s.proc[b] else c) - 1e-9
    for p in range(3):
        slots = sorted((s.start[t], s.finish[t]) for t in range(10) if s.proc[t] == p)
        assert all(f1 <= s2 + 1e-9 for (_, f1), (s2, _) in zip(slots, slots[1:]))
