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
    (("G", "DEV", "0s"), r"must be positive, got '0s'"),
    (("G", "DEV", "5 parsecs"), r"time_limit_s"),
])
def test_run_optimize_names_the_argument_of_the_wrong_type(args, match) -> None:
    g, dev = Graph.load(RESNET), preset("v100-16gb")
    args = tuple(g if a == "G" else dev if a == "DEV" else a for a in args)
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
