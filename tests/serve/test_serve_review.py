"""`hybrid serve` after a new user's review: swap plans only when swapping is served, the not-shared rows called
the ideal when the models cannot all fit, the bytes no service time counts, and plain printed figures."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from hybrid.device import preset
from hybrid.graph import Graph
from hybrid.placement.partition import graph_outputs
from hybrid.serve import ModelCosts, ServeConfig, model_costs, simulate_serving
from hybrid.units import format_bytes
from tests.cli.helpers import run
from tests.serve.test_serve_inputs import fails, inference_graph, write

# inference_graph(): 6 MiB of parameters, a largest op of 7.5 MiB, 1 MiB in and 2 MiB out per batch of 2.
# With 16 models in 20 MiB, time-sharing fits (6 MiB beside the activations) but a swapping share (1.25 MiB)
# holds no op, and all 16 models' parameters (96 MiB) do not fit at once.
CROWDED = ["--models", 16, "--memory", "20MiB", "--rate", 500, "--duration", "5s"]


@pytest.fixture(scope="module")
def infer(tmp_path_factory) -> Path:
    return write(inference_graph(), tmp_path_factory.mktemp("serve-review") / "infer.json")


# ---- 1. the swap plan is made only when swapping is served ------------------------------------------------

def test_time_shared_alone_makes_no_swap_plan(infer: Path) -> None:
    r = run("serve", "--graph", infer, *CROWDED, "--policy", "time-shared")
    assert r.exit_code == 0, r.output
    assert "each for swapping" not in r.output and "swap plan" not in r.output
    assert "16 model(s) on synthetic: 20 MiB shared, batch 2" in r.output
    j = json.loads(run("serve", "--graph", infer, *CROWDED, "--policy", "time-shared", "--json").output)
    assert j["share_bytes"] is None and all(m["swap_s"] is None for m in j["models"])


def test_swapping_in_a_share_too_small_is_still_one_line(infer: Path) -> None:
    line = fails("--graph", infer, *CROWDED, "--policy", "swapping")
    assert "gets 1.25 MiB, less than its largest op" in line
    line = fails("--graph", infer, *CROWDED)   # every policy: swapping among them
    assert "less than its largest op" in line


def test_swapping_served_still_says_its_share(infer: Path) -> None:
    r = run("serve", "--graph", infer, "--models", 2, "--rate", 5, "--duration", "5s")
    assert r.exit_code == 0, r.output
    assert "each for swapping" in r.output and "swap plan" in r.output


def test_model_costs_without_swapping_plans_nothing() -> None:
    g = inference_graph()
    dev = preset("v100-16gb")
    c = model_costs(g, dev, 1 << 10, swapping=False)   # 1 KiB holds no op: no plan is asked for
    assert c.swap_s is None and c.ideal_s > 0
    with_plan = model_costs(g, dev, 1 << 30)
    assert with_plan.swap_s == pytest.approx(with_plan.ideal_s)   # the default still plans, as fig8 needs
    df = simulate_serving([c], ServeConfig(rates=(5.0,), batch=2, duration_s=5, policies=("time-shared",)))
    assert list(df.policy) == ["time-shared"]
    with pytest.raises(Exception, match="no swap plan"):
        simulate_serving([c], ServeConfig(rates=(5.0,), batch=2, duration_s=5, policies=("swapping",)))


# ---- 2. not-shared is the ideal when the models cannot all fit ---------------------------------------------

def test_not_shared_rows_say_they_are_the_ideal(infer: Path, tmp_path: Path) -> None:
    r = run("serve", "--graph", infer, *CROWDED, "--policy", "not-shared", "--policy", "time-shared",
            "--csv", tmp_path / "t.csv")
    assert r.exit_code == 0, r.output
    assert ("note: not-shared: each model as if alone on the GPU (the ideal; 16 x 6 MiB of parameters and "
            in r.output) and "do not fit in 20 MiB)" in r.output
    assert set(pd.read_csv(tmp_path / "t.csv").policy) == {"not-shared", "time-shared"}   # values as before
    roomy = run("serve", "--graph", infer, "--models", 2, "--rate", 5, "--duration", "5s", "--policy", "not-shared")
    assert roomy.exit_code == 0 and "as if alone" not in roomy.output   # they fit: the rows are what one GPU does


def test_the_plot_legend_says_not_shared_is_the_ideal(infer: Path, tmp_path: Path, monkeypatch) -> None:
    import hybrid.files

    legends: list[list[str]] = []

    def keep(fig, path, dpi=120):  # noqa: ANN001, ANN202
        legends.append([t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()])
        Path(path).write_bytes(b"png")

    monkeypatch.setattr(hybrid.files, "save_figure", keep)
    r = run("serve", "--graph", infer, *CROWDED, "--policy", "not-shared", "--plot", tmp_path / "p.png")
    assert r.exit_code == 0, r.output
    (labels,) = legends
    assert len(labels) == 1 and labels[0].startswith("not-shared (16)") and "ideal" in labels[0], labels


# ---- 3. what no service time counts ------------------------------------------------------------------------

def test_a_note_names_the_bytes_no_service_time_counts(infer: Path) -> None:
    g = Graph.load(infer)
    inputs = sum(t.bytes for t in g.tensors if t.kind == "input")
    outputs = sum(g.tensors[i].bytes for i in graph_outputs(g))
    r = run("serve", "--graph", infer, "--rate", 5, "--duration", "5s", "--policy", "not-shared")
    assert r.exit_code == 0, r.output
    note = [ln for ln in r.output.splitlines() if "compute only" in ln]
    assert len(note) == 1 and note[0].startswith("note:"), r.output
    assert f"({format_bytes(inputs)}, " in note[0] and f"({format_bytes(outputs)}, " in note[0]
    assert "hybrid place --objective throughput" in note[0]
    j = json.loads(run("serve", "--graph", infer, "--rate", 5, "--duration", "5s", "--json").output)
    assert j["models"][0]["input_bytes"] == inputs and j["models"][0]["output_bytes"] == outputs
    text = " ".join(run("serve", "--help").output.split())
    assert "compute only" in text and "output download are not counted" in text


def test_model_costs_count_a_batchs_inputs_and_outputs() -> None:
    g = inference_graph()
    c = model_costs(g, preset("v100-16gb"), 1 << 30)
    assert c.input_bytes == 1 << 20 and c.output_bytes == 2 << 20
    assert ModelCosts("m", 0.01, 0.01, 1, 1).input_bytes == 0   # positional construction as before


# ---- 7. printed figures -------------------------------------------------------------------------------------

def test_p99_is_printed_without_an_exponent(infer: Path) -> None:
    # about 1,000 requests/s of capacity at 2,000 requests/s: the queue grows to seconds, p99 over 10,000 ms
    args = ["--graph", infer, "--rate", 2000, "--duration", "30s", "--policy", "not-shared"]
    r = run("serve", *args)
    assert r.exit_code == 0, r.output
    p99 = json.loads(run("serve", *args, "--json").output)["rows"][0]["p99_s"] * 1e3
    assert p99 > 1e4
    table = r.output.splitlines()
    header = next(i for i, ln in enumerate(table) if "p99_ms" in ln)
    cells = table[header + 1].split()
    assert not any(re.search(r"e[+-]\d", c) for c in cells), cells
    assert cells[table[header].split().index("p99_ms")] == f"{p99:.2f}"


def test_one_copy_is_named_once(infer: Path) -> None:
    r = run("serve", "--graph", infer, "--models", 1, "--rate", 5, "--duration", "5s", "--policy", "not-shared")
    assert r.exit_code == 0, r.output
    assert "infer-8-3#0:" in r.output and "#0..#0" not in r.output
    r = run("serve", "--graph", infer, "--models", 3, "--rate", 5, "--duration", "5s", "--policy", "not-shared")
    assert "infer-8-3#0..#2:" in r.output


# ---- 6. a plan given where a graph goes -------------------------------------------------------------------

def test_a_plan_given_as_the_graph_says_to_give_the_graph(infer: Path, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"format": "hybrid-plan/1"}))
    line = fails("--graph", plan, "--batch", 2, "--rate", 1)
    assert "give here the graph file the plan was made for" in line, line
    assert "? use --plan)" not in line   # serve has no --plan
