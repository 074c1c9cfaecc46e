"""The timeline figure (review 2): the memory the plan's allocation reserves (its arena, or its size classes'
pool) is drawn beside the live bytes, and reruns of ops (recompute) have their own colour and a legend entry;
`hybrid timeline` refuses a trace written under a figure's name, and its help names the figure formats."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.plan.types import ArenaAllocation, SizeClass, SizeClassAllocation
from hybrid.report.timeline import RECOMPUTE_COLOR, RESERVED_COLOR, plot_timeline, reserved_bytes
from tests.cli.helpers import RESNET, run


@pytest.fixture(scope="module")
def belady(tmp_path_factory: pytest.TempPathFactory) -> tuple[Graph, Plan]:
    """resnet18-b32's Belady plan at 64 MiB, a byte budget with recompute events."""
    path = tmp_path_factory.mktemp("tl") / "b.json"
    r = run("baseline", "--graph", RESNET, "--kind", "belady", "--memory", "64MiB", "--no-arena", "--out", path)
    assert r.exit_code == 0, r.output
    plan = Plan.load(path)
    assert any(e.kind == "compute" and e.recompute for e in plan.events)
    return Graph.load(RESNET), plan


def _hlines(ax) -> list[tuple[float, str]]:  # noqa: ANN001 - a matplotlib Axes
    """(height, colour) of the horizontal lines across the axes."""
    from matplotlib.colors import to_hex

    out = []
    for line in ax.get_lines():
        y = np.asarray(line.get_ydata(), float)
        if len(y) == 2 and y[0] == y[1]:
            out.append((float(y[0]), to_hex(line.get_color())))
    return out


def test_the_reserved_memory_is_drawn(belady) -> None:
    import matplotlib.pyplot as plt

    graph, plan = belady
    assert reserved_bytes(plan) is None
    arena = dataclasses.replace(plan, allocation=ArenaAllocation(60 * 2**20, {}))
    pool = dataclasses.replace(plan, allocation=SizeClassAllocation((SizeClass(2**20, 30), SizeClass(2**22, 5)), {}))
    assert reserved_bytes(arena) == (60 * 2**20, "arena")
    assert reserved_bytes(pool) == (50 * 2**20, "size-class pool")
    fig = plot_timeline(graph, [("byte budget", plan), ("arena", arena), ("pool", pool)])
    try:
        mem = [fig.axes[1], fig.axes[3], fig.axes[5]]    # lanes, memory, per plan
        assert (60.0, RESERVED_COLOR) in _hlines(mem[1]) and (50.0, RESERVED_COLOR) in _hlines(mem[2])
        assert not any(c == RESERVED_COLOR for _, c in _hlines(mem[0]))    # a byte budget reserves nothing
        assert any("arena 60 MiB" in t.get_text() for t in mem[1].texts)
        assert any("size-class pool 50 MiB" in t.get_text() for t in mem[2].texts)
    finally:
        plt.close(fig)


def test_reruns_have_their_own_colour_and_legend(belady) -> None:
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    graph, plan = belady
    fig = plot_timeline(graph, plan)
    try:
        lanes = fig.axes[0]
        colours = {to_hex(c) for coll in lanes.collections for c in coll.get_facecolor()}
        assert RECOMPUTE_COLOR in colours
        legend = lanes.get_legend()
        assert legend is not None and any("recompute" in t.get_text() for t in legend.get_texts())
    finally:
        plt.close(fig)
    plain = dataclasses.replace(plan, events=[e for e in plan.events if not (e.kind == "compute" and e.recompute)])
    fig = plot_timeline(graph, plain)   # no rerun, no legend (the plan need not be valid to be drawn)
    try:
        assert fig.axes[0].get_legend() is None
    finally:
        plt.close(fig)


def test_a_chrome_trace_is_not_written_under_a_figure_name(belady, tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    belady[1].save(path)
    r = run("timeline", "--graph", RESNET, "--plan", path, "--format", "chrome", "--out", tmp_path / "t.png")
    assert r.exit_code == 2 and "--format chrome" in r.output and ".json" in r.output, r.output
    assert not (tmp_path / "t.png").exists()
    r = run("timeline", "--help")
    assert ".svg" in r.output and ".pdf" in r.output, r.output


def test_a_plan_far_below_its_memory_is_drawn_on_its_own_scale(belady) -> None:
    """A placement plan's 13 MiB on a 15 GiB card was a flat line at 0 under the usable line: the memory panel
    takes the plan's own scale where it holds under OFF_SCALE_SHARE of its memory, and the label says the usable
    line is above it."""
    import matplotlib.pyplot as plt

    from hybrid.report.timeline import memory_profile

    graph, plan = belady
    held = int(memory_profile(graph, plan)[1].max())
    huge = dataclasses.replace(plan, device=dataclasses.replace(plan.device, memory_bytes=4000 * held,
                                                                reserve_bytes=0))
    fig = plot_timeline(graph, [("near", plan), ("huge", huge)])
    try:
        near, far = fig.axes[1], fig.axes[3]
        assert far.get_ylabel() == "device MiB" and far.get_ylim()[1] == pytest.approx(held / 2**20 * 1.08)
        assert near.get_ylim()[1] >= plan.device.usable_bytes / 2**20     # the usable line on the axis
        assert any("above this scale: the plan holds at most" in t.get_text() for t in far.texts)
        assert not any("above this scale" in t.get_text() for t in near.texts)
        assert len(_hlines(near)) >= 1 and not [y for y, c in _hlines(far) if c == "#c44e52"]   # no usable line
    finally:
        plt.close(fig)
