"""Every figure the README quotes from a result table is read from that table here: a rerun that moves it, or
an edit that changes the README's sentence, fails this test until the two agree again. Figures the README does not
quote it links (the table names, checked to exist)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
README = " ".join((ROOT / "README.md").read_text().split())     # one line: sentences wrap anywhere


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms"


def mib(v: float) -> str:
    return f"{v:,.0f} MiB"


def executor_gpu_figures() -> list[str]:
    """The PyTorch comparison: each side's time and memory at 35% of the model's peak (results/executor_gpu.*)."""
    runs = pd.read_csv(RESULTS / "executor_gpu.csv")
    infos = {i["model"]: i for i in json.loads((RESULTS / "executor_gpu.json").read_text())["infos"]}
    out = []
    for model in ("resnet-50", "rnn-4-2k"):
        r = runs[(runs.model == model) & (runs.memory == "35%") & (runs.plan == "belady (arena offsets)")].iloc[0]
        i = infos[model]
        out += [ms(r.measured_s), mib(r.memory_MiB), f"{mib(r.cuda_max_allocated_MiB)} measured",
                ms(i["eager_save_on_cpu_s"]), mib(i["eager_save_on_cpu_peak_MiB"]), ms(i["eager_checkpoint_s"]),
                mib(i["eager_checkpoint_peak_MiB"])]
    ratio = runs.issued_s / runs.measured_s
    rnn = ratio[runs.model == "rnn-4-2k"]
    out.append(f"{rnn.min():.1f}-{rnn.max():.1f}x faster than issuing node by node")
    out.append(f"resnet-50's up to {ratio[runs.model == 'resnet-50'].max():.1f}x")
    return out


def test_the_pytorch_comparison_quotes_executor_gpu_with_each_sides_memory() -> None:
    missing = [f for f in executor_gpu_figures() if f not in README]
    assert not missing, f"README's executor_gpu figures differ from results/executor_gpu.*: {missing}"


def test_the_checkpointing_comparison_quotes_vs_torch_with_its_ceilings() -> None:
    """hybrid's speedup over checkpointing and the bound's ceiling, transformers and CNNs (results/vs_torch.csv)."""
    df = pd.read_csv(RESULTS / "vs_torch.csv")
    cp = df[(df.alternative == "checkpoint") & (df.source == "simulated")].set_index("model")
    quoted = []
    for models in (["transformer-lm", "gpt2", "llama"], ["resnet-50", "vgg16", "unet"]):
        rows = cp.loc[models]
        quoted += [f"{rows.speedup.min():.3f}-{rows.speedup.max():.3f}x",
                   f"{rows.ceiling.min():.3f}-{rows.ceiling.max():.3f}x"]
    missing = [f for f in quoted if f not in README]
    assert not missing, f"README's vs_torch figures differ from results/vs_torch.csv: {missing}"


def test_placement_model_count_matches_its_table() -> None:
    n = pd.read_csv(RESULTS / "placement_latency.csv")["model"].nunique()
    words = {11: "eleven", 4: "four"}
    assert f"`results/placement_latency.md` has the paper's {words.get(n, n)} models" in README


def test_regenerate_times_match_its_table() -> None:
    text = (RESULTS / "regenerate_quick.md").read_text()
    code, minutes = re.search(r"Code ([0-9a-f]{7}); ([0-9.]+) minutes in all on this machine \(--quick\)",
                              text).groups()
    assert f"(a quick one at {code}: {minutes} minutes," in " ".join(README.split())


def test_every_table_the_readme_names_exists() -> None:
    named = set(re.findall(r"results/([A-Za-z0-9_.-]+\.md)", README))
    named |= {n for n in re.findall(r"`([a-z0-9_]+\.md)`", README) if (RESULTS / n).exists() or "_" in n}
    missing = sorted(n for n in named if not (RESULTS / n).exists() and n not in ("README.md",))
    assert not missing, f"README names tables that are not in results/: {missing}"


def test_the_measured_comparison_quotes_vs_torch_measured_and_its_replay() -> None:
    """The H200's rows (results/vs_torch_measured.csv) and the same peaks planned again with its profile
    (results/vs_torch_replay.csv), as the README's paragraph on them quotes them."""
    m = pd.read_csv(RESULTS / "vs_torch_measured.csv")
    ran = m[m.speedup.notna()]
    cp = ran[ran.alternative == "checkpoint"].set_index("model").speedup
    both = ran[ran.alternative == "checkpoint+save_on_cpu"].set_index("model").speedup
    eager = ran[ran.alternative == "eager"].speedup
    ratio = ran["hybrid_measured/simulated"]
    quoted = [f"{cp[k]:.3f}x {w}" for k, w in (("resnet-50", "faster than checkpointing at its peak on resnet-50"),
                                                ("llama", "on llama"), ("unet", "on unet"), ("vgg16", "on vgg16"),
                                                ("gpt2", "on gpt2"))]
    quoted += [f"{both.drop('resnet-50').min():.3f}-{both.drop('resnet-50').max():.3f}x faster than checkpointing "
               f"with `save_on_cpu`", f"{both['resnet-50']:.3f}x on resnet-50",
               f"{eager.min():.3f}-{eager.max():.3f}x eager's speed at eager's peak",
               f"at {ratio.min():.2f}-{ratio.max():.2f}x its simulated time",
               f"on {int(ran['peak_within_1%'].sum())} of {len(ran)} runs"]
    r = pd.read_csv(RESULTS / "vs_torch_replay.csv").set_index(["model", "alternative"])
    at = r.loc[("resnet-50", "checkpoint+save_on_cpu")]
    quoted += [f"resnet-50 at 928 MiB is now {at.replay_ms:.2f} ms ({at.replay_speedup:.3f}x",
               f"vgg16 laid out at checkpoint's peak {r.loc[('vgg16', 'checkpoint')].replay_speedup:.3f}x",
               f"gpt2 {r.loc[('gpt2', 'checkpoint')].replay_speedup:.3f}x where "
               f"{r.loc[('gpt2', 'checkpoint')].ceiling:.3f}x is the ceiling",
               f"(the ceiling is {r.loc[('resnet-50', 'eager')].ceiling:.3f}x",
               f"vgg16's is {r.loc[('vgg16', 'eager')].replay_speedup:.3f}x with its workspace held aside where the "
               f"ceiling is {r.loc[('vgg16', 'eager')].ceiling:.3f}x"]
    summary = (RESULTS / "vs_torch_replay.md").read_text()
    reach, won = re.search(r"ceiling is >= 1\.10x on (\d+) of 5 models and the replayed plan >= 1\.10x on (\d+)",
                           summary).groups()
    quoted.append(f"leaves 1.10x in reach on {reach} of 5 models and the replayed plans reach it on {won}")
    missing = [f for f in quoted if f not in README]
    assert not missing, f"README's measured figures differ from results/vs_torch_measured.csv or _replay: {missing}"


def test_the_host_link_figures_quote_link_retime() -> None:
    """The latency the one-stream rows imply and the re-timed range at 0.95x the rate (results/link_retime.csv)."""
    df = pd.read_csv(RESULTS / "link_retime.csv")
    implied = df.implied_latency_us.dropna()
    col = next(c for c in df.columns if c.startswith("m/s ") and c.endswith(", 0.95x"))
    quoted = [f"imply {implied.iloc[0]:.2f} and {implied.iloc[1]:.2f} us",
              f"all {len(df)} baseline rows come within 5% ({df[col].min():.3f}-{df[col].max():.3f}x"]
    assert ((df[col] - 1).abs() <= 0.05).all()
    missing = [f for f in quoted if f not in README]
    assert not missing, f"README's link_retime figures differ from results/link_retime.csv: {missing}"
