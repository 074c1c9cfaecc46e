"""`--memory 50%`: a share of the graph's unswapped peak, as `hybrid frontier --memories` reads it, on every
command with a graph; refused in one line where a command has none (or several)."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from hybrid.cli.main import cli
from hybrid.cli.options import device_from
from hybrid.errors import HybridError
from hybrid.graph.info import unswapped_peak
from hybrid.plan import Plan
from tests.cli.helpers import foreign_graph_file


@pytest.fixture()
def graph_file(tmp_path: Path) -> Path:
    return foreign_graph_file(tmp_path)   # any small training graph


def _flags(**given: str) -> dict[str, str | None]:
    return {k: given.get(k) for k in ("device_name", "memory", "h2d", "d2h", "latency", "reserve", "alignment")}


@pytest.mark.parametrize("text, share", [("50%", 0.5), (" 37.5 % ", 0.375), ("100%", 1.0), ("150%", 1.5)])
def test_a_share_is_of_the_unswapped_peak_at_the_device_alignment(graph_file: Path, text: str, share: float) -> None:
    from hybrid.graph import Graph

    g = Graph.load(graph_file)
    dev = device_from(g, _flags(memory=text, alignment="4096"))
    assert dev.alignment_bytes == 4096
    assert dev.memory_bytes == round(share * unswapped_peak(g, 4096))
    assert dev.reserve_bytes == 0 and dev.usable_bytes == dev.memory_bytes


def test_a_reserve_given_is_kept_aside_on_top_of_the_share(graph_file: Path) -> None:
    from hybrid.graph import Graph

    g = Graph.load(graph_file)
    dev = device_from(g, _flags(memory="60%", reserve="1MiB"))
    assert dev.reserve_bytes == 1 << 20
    assert dev.usable_bytes == round(0.6 * unswapped_peak(g, dev.alignment_bytes))


def test_simulate_writes_a_plan_on_that_share(graph_file: Path, tmp_path: Path) -> None:
    from hybrid.graph import Graph

    out = tmp_path / "p.json"
    r = CliRunner().invoke(cli, ["simulate", "--graph", str(graph_file), "--memory", "70%", "--out", str(out)])
    assert r.exit_code == 0, r.output
    g = Graph.load(graph_file)
    assert Plan.load(out).device.memory_bytes == round(0.7 * unswapped_peak(g, g.device.alignment_bytes))


def test_simulate_from_reads_the_share_of_its_graph(graph_file: Path, tmp_path: Path) -> None:
    from hybrid.graph import Graph

    first, second = tmp_path / "a.json", tmp_path / "b.json"
    assert CliRunner().invoke(cli, ["simulate", "--graph", str(graph_file), "--out", str(first)]).exit_code == 0
    r = CliRunner().invoke(cli, ["simulate", "--graph", str(graph_file), "--from", str(first), "--memory", "80%",
                                 "--out", str(second)])
    assert r.exit_code == 0, r.output
    g = Graph.load(graph_file)
    assert Plan.load(second).device.memory_bytes == round(0.8 * unswapped_peak(g, g.device.alignment_bytes))


@pytest.mark.parametrize("text, words", [("5x%", "cannot read --memory '5x%'"), ("0%", "within (0%, 1000%]"),
                                         ("2000%", "within (0%, 1000%]"), ("-5%", "cannot read --memory")])
def test_a_bad_share_is_refused_in_one_line_naming_the_flag(graph_file: Path, text: str, words: str) -> None:
    r = CliRunner().invoke(cli, ["simulate", "--graph", str(graph_file), "--memory", text])
    assert r.exit_code == 2 and words in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_a_share_without_a_graph_says_to_give_a_size() -> None:
    with pytest.raises(HybridError, match=r"--memory 50%: a percentage .* has no graph yet; give a size"):
        device_from(None, _flags(memory="50%"))


def test_frontier_still_reads_shares() -> None:
    from hybrid.report.frontier import parse_memories

    assert parse_memories(["50%,1000B", "100%"], 4000) == [1000, 2000, 4000]
    with pytest.raises(HybridError, match="--memories"):
        parse_memories(["x%"], 4000)
