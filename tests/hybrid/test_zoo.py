"""The model zoo: names, shapes on the meta device, small real training steps, reference parameter counts."""
from __future__ import annotations

import json
import math
import sys

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from hybrid.cli.main import cli  # noqa: E402
from hybrid.errors import HybridError  # noqa: E402
from hybrid.zoo import ModelSpec, get_model, list_models, parameter_count  # noqa: E402
from hybrid.zoo.rnn import StackedLSTM  # noqa: E402

META = torch.device("meta")
CANONICAL = ["rnn-8-8k", "brnn-4-8k", "wresnet-152-10", "inception-v4-4", "nasnet-25", "resnet-152", "vgg19", "unet",
             "vgg11", "vgg16", "alexnet", "mobilenet", "squeezenet", "resnet-18", "resnet-34", "resnet-50",
             "resnet-101", "googlenet", "gpt2", "llama"]
# Ops that are device-specific or fused recurrent kernels: a zoo graph must not contain them.
NOT_PORTABLE = ("lstm", "gru", "rnn_", "mkldnn", "cudnn", "miopen", "_fused")


def _has_transformers() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


class _OpNames(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func._overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _expected_shape(spec: ModelSpec, batch: int) -> tuple[int, ...]:
    c = spec.config
    if spec.family in ("rnn", "brnn"):
        return (batch, c["seq_len"], c["vocab"])
    if spec.family in ("gpt2", "llama"):
        return (batch, c["seq_len"], c["vocab_size"])
    if spec.family == "unet":
        return (batch, c["out_channels"], c["image_size"], c["image_size"])
    return (batch, c["num_classes"])


def test_list_models_names_every_canonical_model_once():
    names = [s.name for s in list_models()]
    assert set(CANONICAL) <= set(names)
    assert len(names) == len(set(names))


@pytest.mark.parametrize("name", CANONICAL)
def test_builds_on_meta_with_paper_batch_and_right_shapes(name):
    spec = get_model(name)
    if spec.family in ("gpt2", "llama") and not _has_transformers():
        pytest.skip("transformers not installed")
    with torch.device("meta"):
        model = spec.build()
    assert all(p.is_meta for p in model.parameters())
    args, target = spec.make_inputs(spec.default_batch, META, torch.float32)
    assert all(a.is_meta for a in args) and target.is_meta
    ops = _OpNames()
    with ops:
        out = model(*args)
        loss = spec.loss(out, target)
    assert tuple(out.shape) == _expected_shape(spec, spec.default_batch)
    assert loss.shape == ()
    bad = sorted(n for n in ops.names if any(k in n for k in NOT_PORTABLE))
    assert not bad, f"{name} uses device-specific ops {bad}"


@pytest.mark.parametrize("name,overrides", [
    ("rnn-2-1k", {"seq_len": 4, "vocab": 50}),
    ("brnn-2-1k", {"seq_len": 4, "vocab": 50, "hidden": 64}),
    ("wresnet-18-2", {"image_size": 32, "num_classes": 10}),
    ("nasnet-1", {"filters": 8, "stem_multiplier": 1, "image_size": 64, "num_classes": 10,
                  "skip_reduction_input": False}),
    ("unet", {"image_size": 32, "base": 8}),
    ("mobilenet", {"image_size": 32, "num_classes": 10}),
    ("squeezenet", {"image_size": 64, "num_classes": 10}),
    ("googlenet", {"image_size": 64, "num_classes": 10}),
])
def test_small_configs_train_one_step_on_cpu(name, overrides):
    spec = get_model(name, **overrides)
    torch.manual_seed(0)
    model = spec.build()
    args, target = spec.make_inputs(2, torch.device("cpu"), torch.float32)
    out = model(*args)
    assert tuple(out.shape) == _expected_shape(spec, 2)
    loss = spec.loss(out, target)
    assert loss.shape == () and math.isfinite(loss.item())
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


def test_build_and_inputs_are_deterministic():
    spec = get_model("rnn-1-1k", seq_len=3, vocab=30, hidden=16)
    torch.manual_seed(3)
    a = spec.build()
    torch.manual_seed(3)
    b = spec.build()
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    (x1,), y1 = spec.make_inputs(4, torch.device("cpu"), torch.float32)
    (x2,), y2 = spec.make_inputs(4, torch.device("cpu"), torch.float32)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert torch.equal(x1[:, 1:], y1[:, :-1])  # targets are the next tokens


@pytest.mark.parametrize("name,count", [
    ("resnet-18", 11_689_512), ("resnet-34", 21_797_672), ("resnet-50", 25_557_032), ("resnet-101", 44_549_160),
    ("resnet-152", 60_192_808), ("vgg11", 132_863_336), ("vgg16", 138_357_544), ("vgg19", 143_667_240),
    ("alexnet", 61_100_840), ("squeezenet", 1_248_424), ("googlenet", 6_624_904), ("mobilenet-v2", 3_504_872),
    ("mobilenet", 4_231_976),
])
def test_parameter_counts_equal_reference_implementations(name, count):
    """torchvision's counts (MobileNet v1: Keras' trainable count)."""
    assert parameter_count(get_model(name)) == count


def test_nasnet_matches_published_mobile_and_large_models():
    """Keras' trainable parameter counts for NASNet-A Mobile (4 @ 1056) and Large (6 @ 4032)."""
    mobile = get_model("nasnet-4", filters=44, stem_multiplier=1, image_size=224, skip_reduction_input=False)
    assert parameter_count(mobile) == 5_289_978
    assert parameter_count(get_model("nasnet-6")) == 88_753_150


def test_width_scale_one_is_the_standard_model():
    assert parameter_count(get_model("wresnet-152-1")) == 60_192_808
    assert parameter_count(get_model("wresnet-50-2")) > 3.5 * 25_557_032  # every conv's channels doubled


def test_rnn_parameters_are_shared_across_time_steps():
    counts = {t: parameter_count(get_model("rnn-2-1k", seq_len=t)) for t in (1, 40, 200)}
    assert len(set(counts.values())) == 1
    h, v, e = 1024, 10_000, 1024
    lstm = lambda n_in: 4 * h * (n_in + h) + 2 * 4 * h  # noqa: E731
    assert counts[1] == v * e + lstm(e) + lstm(h) + h * v + v
    b = parameter_count(get_model("brnn-2-1k", seq_len=7))
    assert b == v * e + 2 * lstm(e) + 2 * lstm(2 * h) + 2 * h * v + v


def test_unrolled_lstm_matches_torch_lstm():
    """Same weights in nn.LSTM (bidirectional, 2 layers) give the same per-step outputs."""
    torch.manual_seed(0)
    model = StackedLSTM(layers=2, hidden=8, vocab=11, embed=6, bidirectional=True).double()
    ref = torch.nn.LSTM(6, 8, num_layers=2, bidirectional=True, batch_first=True).double()
    with torch.no_grad():
        for layer in range(2):
            for suffix, cell in (("", model.forward_cells[layer]), ("_reverse", model.backward_cells[layer])):
                getattr(ref, f"weight_ih_l{layer}{suffix}").copy_(cell.i2h.weight)
                getattr(ref, f"weight_hh_l{layer}{suffix}").copy_(cell.h2h.weight)
                getattr(ref, f"bias_ih_l{layer}{suffix}").copy_(cell.i2h.bias)
                getattr(ref, f"bias_hh_l{layer}{suffix}").copy_(cell.h2h.bias)
    tokens = torch.randint(11, (3, 5))
    seen = {}
    model.decoder.register_forward_pre_hook(lambda m, a: seen.setdefault("h", a[0]))
    model(tokens)
    expected, _ = ref(model.embed(tokens))
    torch.testing.assert_close(seen["h"], expected)


@pytest.mark.parametrize("name,canonical,config", [
    ("RNN-8-8K", "rnn-8-8k", {"layers": 8, "hidden": 8192, "seq_len": 40, "bidirectional": False}),
    ("brnn-4-8k", "brnn-4-8k", {"layers": 4, "hidden": 8192, "bidirectional": True}),
    ("wresnet-152-10", "wresnet-152-10", {"depth": 152, "width": 10, "image_size": 224}),
    ("inception-4", "inception-v4-4", {"width": 4, "image_size": 299}),
    ("nasnet-25", "nasnet-25", {"repeats": 25}),
    ("resnet152", "resnet-152", {"depth": 152}),
    ("VGG-19", "vgg19", {"image_size": 227}),
    ("unet", "unet", {"image_size": 256}),
])
def test_names_parse_to_canonical_specs(name, canonical, config):
    spec = get_model(name)
    assert spec.name == canonical
    assert {k: spec.config[k] for k in config} == config


def test_default_batches_follow_the_papers():
    batch = {s.name: s.default_batch for s in list_models()}
    assert (batch["rnn-8-8k"], batch["brnn-4-8k"]) == (256, 128)  # SwapAdvisor Table 1
    assert batch["wresnet-152-10"] == batch["inception-v4-4"] == batch["nasnet-25"] == 64
    assert (batch["vgg19"], batch["unet"]) == (144, 120)  # MO-SOS §3.1
    assert batch["alexnet"] == batch["resnet-18"] == 1  # placement paper


def test_unknown_name_lists_what_is_available():
    with pytest.raises(HybridError, match=r"unknown model 'foonet'.*rnn-\{L\}-\{X\}k.*nasnet-\{R\}"):
        get_model("foonet")
    with pytest.raises(HybridError, match=r"unknown model 'vgg20': names of that family follow vgg\{11,13,16,19\}"):
        get_model("vgg20")      # a family's size it does not come in: that family's names


@pytest.mark.parametrize("name", ["examples.MyNet", "examples/MyNet.py", "mine:make"])
def test_a_python_module_given_as_a_zoo_name_points_to_module(name):
    with pytest.raises(HybridError) as info:
        get_model(name)
    msg = str(info.value)
    assert "--module " in msg and "\n" not in msg
    assert ("--module examples.MyNet:FACTORY" in msg) if "MyNet" in name else ("--module mine:FACTORY" in msg)


def test_bad_overrides_are_reported():
    with pytest.raises(HybridError, match=r"does not accept override 'image_size'.*seq_len"):
        get_model("rnn-8-8k", image_size=3)
    with pytest.raises(HybridError, match=r"seq_len='ten'.*not a valid int"):
        get_model("rnn-8-8k", seq_len="ten")
    with pytest.raises(HybridError, match=r"seq_len=0.*positive"):
        get_model("rnn-8-8k", seq_len=0)
    with pytest.raises(HybridError, match=r"depth 17"):
        get_model("resnet-17")
    assert get_model("rnn-8-8k", seq_len="12").config["seq_len"] == 12  # command-line strings are converted
    assert get_model("vgg16", batch_norm="true").config["batch_norm"] is True


def test_transformers_missing_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` fail
    spec = get_model("gpt2")  # listing works without it
    with pytest.raises(HybridError, match=r"pip install 'hybrid-offload\[transformers\]'"):
        spec.build()
    with pytest.raises(HybridError, match=r"pip install 'hybrid-offload\[transformers\]'"):
        parameter_count(get_model("llama"))


@pytest.mark.skipif(not _has_transformers(), reason="transformers not installed")
@pytest.mark.parametrize("name,overrides", [("gpt2", {"n_layer": 1}), ("llama", {"num_hidden_layers": 1})])
def test_transformers_models_train_one_step(name, overrides):
    spec = get_model(name, seq_len=8, **overrides)
    torch.manual_seed(0)
    model = spec.build()
    args, target = spec.make_inputs(2, torch.device("cpu"), torch.float32)
    loss = spec.loss(model(*args), target)
    assert math.isfinite(loss.item())
    loss.backward()


def test_cli_json_lists_models_with_meta_parameter_counts():
    result = CliRunner().invoke(cli, ["models", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert set(CANONICAL) <= set(rows)
    assert rows["vgg19"]["parameters"] == 143_667_240
    assert rows["vgg19"]["parameter_bytes_fp32"] == 4 * 143_667_240
    assert rows["rnn-8-8k"]["default_batch"] == 256 and rows["rnn-8-8k"]["config"]["seq_len"] == 40


def test_cli_table_for_named_models_with_overrides():
    result = CliRunner().invoke(cli, ["models", "rnn-2-1k", "--set", "seq_len=7"])
    assert result.exit_code == 0, result.output
    assert "rnn-2-1k" in result.output and "7 steps" in result.output and "parameters" in result.output
    bad = CliRunner().invoke(cli, ["models", "rnn-2-1k", "--set", "seq_len"])
    assert bad.exit_code == 2 and "KEY=VALUE" in bad.output
