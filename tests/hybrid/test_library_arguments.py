"""Library callers get one line naming the argument of the wrong type (run_optimize, execute), not an
AttributeError from deep inside; a time limit may be given with its unit, as on the command line."""
from __future__ import annotations

import pytest

from hybrid.device import preset
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.pipeline import run_optimize
from tests.cli.helpers import RESNET


@pytest.mark.parametrize("args,match", [
    (("examples/resnet18-b32.json", "DEV", 5), r"^graph must be a hybrid.graph.Graph .*got str 'examples/"),
    (("G", "v100-16gb", 5), r"^device must be a hybrid.device.Device .*got str 'v100-16gb'"),
    (("G", 8 << 20, 5), r"^device must be a hybrid.device.Device .*got int 8388608"),
    (("G", "DEV", 5, {"generations": 2}), r"^options must be an OptimizeOptions .*got dict"),
    (("G", "DEV", [5]), r"^time_limit_s must be seconds \(a number, or text such as '30s'\), got \[5\]"),
    (("G", "DEV", "0s"), r"must be positive and finite .*got '0s'"),
    (("G", "DEV", "5 parsecs"), r"time_limit_s"),
    (("G", "DEV", float("inf")), r"must be positive and finite"),    # every split of it was NaN: no search
    (("G", "DEV", 5, ("OPTS", {"refine_mode": "besides"})),
     r"^--refine-mode \(refine_mode\) must be auto, beside or after"),
    (("G", "DEV", 5, ("OPTS", {"generations": "5"})), r"^--generations \(generations\) must be a whole number"),
    (("G", "DEV", 5, ("OPTS", {"arena_s": "60s"})), r"^--arena \(arena_s\) must be auto, a duration"),
    (("G", "DEV", 5, ("OPTS", {"config": None})), r"^config must be a ga.GAConfig"),
    (("examples/resnet18-b32.json", "DEV", 5, ("OPTS", {"workspaces_aside": True})),
     r"^graph must be a hybrid.graph.Graph"),
])
def test_run_optimize_names_the_argument_of_the_wrong_type(args, match) -> None:
    from hybrid.pipeline import OptimizeOptions

    g, dev = Graph.load(RESNET), preset("v100-16gb")
    args = tuple(g if a == "G" else dev if a == "DEV" else a for a in args)
    args = tuple(OptimizeOptions(**a[1]) if isinstance(a, tuple) and a[:1] == ("OPTS",) else a for a in args)
    with pytest.raises(HybridError, match=match):
        run_optimize(*args)


def test_execute_names_the_argument_of_the_wrong_type() -> None:
    pytest.importorskip("torch")
    from executor import execute

    g = Graph.load(RESNET)
    with pytest.raises(HybridError, match=r"^plan must be a hybrid.plan.Plan \(Plan.load\(path\)\), got str"):
        execute(g, "plan.json", None, None)
    with pytest.raises(HybridError, match=r"^graph must be a hybrid.graph.Graph"):
        execute(str(RESNET), "plan.json", None, None)


def test_a_check_with_another_loss_says_so() -> None:
    """The plan runs the captured loss; a different loss_fn for the eager reference shows at the first loss."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    from executor import execute
    from hybrid.capture import capture
    from hybrid.swap.baselines import run_baseline

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x, y = torch.randn(5, 8), torch.randint(4, (5,))
    g = capture(m, (x,), F.cross_entropy, y, optimizer="sgd", lr=0.1)
    plan = run_baseline(g, g.device, "belady")
    other = execute(g, plan, m, (x,), y, loss_fn=lambda o, t: 2 * F.cross_entropy(o, t), iters=2, check=True)
    assert any("the first iteration's loss already differs" in n for n in other.comparison.notes)
    same = execute(g, plan, m, (x,), y, loss_fn=F.cross_entropy, iters=2, check=True)
    assert same.comparison.max_abs_diff == 0.0 and not same.comparison.notes


def test_validate_and_gaconfig_name_the_argument_of_the_wrong_type() -> None:
    from ga import GAConfig
    from hybrid.validator import validate

    g = Graph.load(RESNET)
    with pytest.raises(HybridError, match=r"^plan must be a hybrid.plan.Plan \(Plan.load\(path\)\), got str"):
        validate(g, "plan.json")
    with pytest.raises(HybridError, match=r"^graph must be a hybrid.graph.Graph"):
        validate(str(RESNET), None)
    with pytest.raises(HybridError, match=r"^--seed \(seed\) must be a whole number, got '1'"):
        GAConfig(seed="1")
    with pytest.raises(HybridError, match=r"^--seed \(seed\) must be 0 or more"):
        GAConfig(seed=-1)


def test_a_whole_float_memory_is_kept_as_bytes() -> None:
    import dataclasses

    dev = dataclasses.replace(preset("v100-16gb"), memory_bytes=(64 << 20) * 1.0)
    assert type(dev.memory_bytes) is int and dev.memory_bytes == 64 << 20
