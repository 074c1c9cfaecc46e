"""A tensor is fetched once at a time: a prefetch and a blocking prefetch of it in one stage would each allocate
it (validator rule 2). Seen in a time-limited incumbent on the MLP at 3.75 MiB (a 2 KiB bias fetched twice per
stage, where memory had room for both); the model now refuses such a solution."""
from __future__ import annotations

from dataclasses import replace

import pytest

from milp.decode import DecodeError, decode
from milp.model import Values, build_model
from milp.stages import build_problem
from milp.start import broken_constraints
from tests.milp.test_model import _offload_only_graph, _solve


def test_a_tensor_fetched_twice_at_once_breaks_only_fetch_once() -> None:
    g = _offload_only_graph()
    _, r = _solve(g, g.device)
    v = r.values
    assert r.status == "optimal" and v.P and not v.Pb
    roomy = build_model(build_problem(g, replace(g.device, memory_bytes=64 << 20)))  # memory is no objection
    assert not broken_constraints(roomy, v)
    twice = Values(v.R, v.S, v.O, v.P, v.Pb | v.P)      # the same prefetch issued blocking as well
    assert [c.name.rsplit("_", 2)[0] for c in broken_constraints(roomy, twice)] == ["fetch_once"]
    with pytest.raises(DecodeError, match="rule 2"):
        decode(roomy, twice)
