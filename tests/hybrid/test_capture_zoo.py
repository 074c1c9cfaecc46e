"""Zoo models captured on the meta device and replayed on real weights: bitwise equal to eager training."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from hybrid.capture import capture_model  # noqa: E402
from hybrid.capture.interpreter import eager_step, mismatches, replay_step  # noqa: E402
from hybrid.errors import HybridError  # noqa: E402
from hybrid.zoo import get_model  # noqa: E402

pytestmark = pytest.mark.torch

# Small configurations of three families: convolutions + batch norm, an unrolled LSTM with shared
# weights, and SqueezeNet (dropout before its classifier). VGG-11 (dropout classifier, 133M parameters
# even at 32x32) takes ~25 s here, so it is marked slow; benchmarks/capture_replay.py covers it and more
# models (results/capture_replay_quick.md).
CASES = [
    ("resnet-18", 2, {"image_size": 32, "num_classes": 10}, "adam", {}),
    ("rnn-2-1k", 3, {"hidden": 16, "embed": 12, "seq_len": 5, "vocab": 40}, "adam", {"weight_decay": 0.01}),
    ("squeezenet", 2, {"image_size": 48, "num_classes": 10}, "sgd", {"momentum": 0.9}),
    pytest.param("vgg11", 2, {"image_size": 32, "num_classes": 10}, "sgd", {"momentum": 0.9},
                 marks=pytest.mark.slow),
]


def _torch_opt(name: str, params, lr: float, options: dict):
    return {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[name](params, lr=lr, **options)


@pytest.mark.parametrize("model,batch,overrides,opt_name,options", CASES,
                         ids=["resnet-18", "rnn-2-1k", "squeezenet", "vgg11"])
def test_zoo_replay_matches_eager(model: str, batch: int, overrides: dict, opt_name: str, options: dict) -> None:
    graph = capture_model(model, batch, optimizer=opt_name, lr=0.05, optimizer_options=options, overrides=overrides)
    spec = get_model(model, **overrides)
    torch.manual_seed(0)
    module = spec.build()
    args, target = spec.make_inputs(batch, torch.device("cpu"), torch.float32)
    eager = copy.deepcopy(module)
    opt = _torch_opt(opt_name, eager.parameters(), 0.05, options)
    reference = eager_step(eager, args, target, spec.loss, optimizer=opt, seed=42)
    result = replay_step(graph, module, args, target, seed=42)
    assert mismatches(result, reference) == []
    assert len(reference.grads) == len(result.grads) and reference.state
    dropouts = {"resnet-18": 0, "rnn-2-1k": 0, "squeezenet": 1, "vgg11": 2}[model]
    assert sum(1 for o in graph.ops if "rng" in o.inputs) == dropouts


def test_zoo_graph_records_the_model() -> None:
    g = capture_model("resnet-18", 2, overrides={"image_size": 32}, optimizer="sgd")
    assert g.name == "resnet-18-b2"
    assert g.extra["model"]["config"]["image_size"] == 32
    assert g.extra["model"]["batch"] == 2


def test_unknown_model_is_one_line() -> None:
    with pytest.raises(HybridError) as info:
        capture_model("resnet-7b")
    assert "unknown model" in str(info.value) and "\n" not in str(info.value)


def test_zoo_inference_graph_is_captured_in_eval_mode() -> None:
    g = capture_model("resnet-18", 2, overrides={"image_size": 32}, optimizer=None)
    assert {o.extra["phase"] for o in g.ops} == {"forward"}
    assert not [o.id for o in g.ops if o.updates]          # batch norm reads its running statistics only


def test_zoo_names_and_overrides_out_of_range_say_what_is_accepted() -> None:
    """A family name with a size it lacks was sent to --module; an image too small for the layers was accepted and
    failed in torch at capture (helper-95)."""
    from hybrid.errors import HybridError
    from hybrid.zoo.registry import get_model

    with pytest.raises(HybridError, match=r"^unknown model 'inception-v4-0\.5': names of that family follow "
                                          r"inception-v4-\{X\}"):
        get_model("inception-v4-0.5")
    for name, mod in (("pkg.mod:make", "pkg.mod"), ("vgg.py", "vgg"), ("vgg:make", "vgg")):   # modules, not sizes
        with pytest.raises(HybridError, match=rf"not a zoo model name .* `hybrid capture --module {mod}:FACTORY`"):
            get_model(name)
    with pytest.raises(HybridError, match=r"^override image_size=31 for model 'vgg16' must be at least 32"):
        get_model("vgg16", image_size=31)
    assert get_model("vgg16", image_size=32).config["image_size"] == 32
