"""Convolution implementations: what capture offers, what they cost, and that they compute the convolution."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from hybrid.capture import capture, replay_step
from hybrid.capture import costs
from hybrid.device import PRESET_COMPUTE
from hybrid.capture.conv_impls import ATOL, RTOL, run_impl
from hybrid.capture.interpreter import mismatches
from hybrid.errors import HybridError

CASES = [  # n, c, h, w, c_out, k, stride, padding, groups, bias
    (2, 3, 9, 7, 5, 3, 1, 1, 1, True),      # odd output: winograd crops its last tile
    (4, 8, 8, 8, 16, 3, 1, 0, 1, False),
    (3, 4, 11, 10, 6, 3, 2, 1, 1, True),     # strided: no winograd
    (2, 4, 7, 7, 6, 1, 1, 0, 1, True),       # 1x1
    (2, 8, 6, 6, 8, 3, 1, 1, 2, True),       # grouped: unfold_gemm only
    (5, 16, 14, 14, 32, 3, 1, 1, 1, True),
]


def _args(case: tuple) -> list:
    n, c, h, w, co, k, s, p, grp, bias = case
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, c, h, w, generator=gen)
    wt = torch.randn(co, c // grp, k, k, generator=gen) / (c * k * k / grp) ** 0.5
    b = torch.randn(co, generator=gen) if bias else None
    return [x, wt, b, [s, s], [p, p], [1, 1], False, [0, 0], grp]


@pytest.mark.parametrize("case", CASES)
def test_each_impl_matches_the_library_call_within_tolerance(case: tuple) -> None:
    args = _args(case)
    ref = torch.ops.aten.convolution.default(*args)
    n, c, h, w, co, k, s, p, grp, bias = case
    names = ["unfold_gemm"] + (["winograd", "winograd_chunk4", "winograd_chunk2"] if k == 3 and s == 1 and grp == 1
                               else [])
    for name in names:
        out = run_impl("convolution", name, args, {})
        assert out.shape == ref.shape and out.is_contiguous(), name
        assert torch.allclose(out, ref, rtol=RTOL, atol=ATOL), (name, float((out - ref).abs().max()))


def test_winograd_refuses_what_it_cannot_compute_and_names_are_checked() -> None:
    args = _args(CASES[2])   # stride 2
    with pytest.raises(HybridError, match="winograd needs a 3x3 kernel, stride 1"):
        run_impl("convolution", "winograd", args, {})
    with pytest.raises(HybridError, match="unknown convolution impl 'fft'"):
        run_impl("convolution", "fft", args, {})
    with pytest.raises(HybridError, match="only convolution ops"):
        run_impl("mm", "unfold_gemm", args, {})


def _shape(n: int = 144, c: int = 512, hw: int = 28, co: int = 512) -> costs.ConvShape:
    return costs.ConvShape(n, c, hw, hw, co, 3, 3, (1, 1), (1, 1), (1, 1), 1, 4, True)


def test_costs_give_a_real_trade_off_on_a_deep_layer() -> None:
    spec = PRESET_COMPUTE["v100-16gb"]
    s = _shape()
    flops = 2 * s.n * s.c_out * s.c_in * 9 * s.out_hw[0] * s.out_hw[1]
    direct = costs.roofline_s(flops, 0, "float32", "conv", spec)
    impls = {name: (t, ws) for name, t, ws in costs.conv_impls(s, "float32", spec, direct, 0)}
    assert impls["default"] == (direct, 0)
    t_w, ws_w = impls["winograd"]
    t_c, ws_c = impls["winograd_chunk4"]
    assert t_w < direct and ws_w > 0                     # faster, needs workspace
    assert t_w < t_c < direct and ws_c < ws_w / 3        # chunks: less workspace, a little slower
    cols = s.n * s.c_in * 9 * s.out_hw[0] * s.out_hw[1] * s.itemsize
    assert impls["unfold_gemm"][1] == cols               # the unfolded buffer is the workspace
    # A shallow, wide-image layer is memory-bound: Winograd's transformed tiles make it slower there.
    sh = _shape(c=64, hw=224, co=64)
    flops = 2 * sh.n * 64 * 64 * 9 * 224 * 224
    d = costs.roofline_s(flops, 0, "float32", "conv", spec)
    shallow = {name: t for name, t, _ in costs.conv_impls(sh, "float32", spec, d, 0)}
    assert shallow["winograd"] > d


def _net() -> tuple:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, stride=2), nn.ReLU(),
                      nn.Flatten(), nn.Linear(8 * 3 * 3, 4))
    x = torch.randn(4, 3, 8, 8)
    y = torch.randint(4, (4,))
    return m, x, y, nn.functional.cross_entropy


def test_capture_emits_impls_with_the_library_call_as_default() -> None:
    m, x, y, lf = _net()
    g = capture(m, x, lf, y, optimizer="sgd")
    convs = [o for o in g.ops if o.kind == "convolution"]
    assert len(convs) == 2
    first, strided = convs
    assert [im.name for im in first.impls] == ["default", "unfold_gemm", "winograd", "winograd_chunk4"]
    assert [im.name for im in strided.impls] == ["default", "unfold_gemm"]
    for o in convs:   # planners that do not choose run the default: the op's own figures
        assert o.impls[o.default_impl].name == "default"
        assert (o.impls[0].time_s, o.impls[0].workspace_bytes) == (o.time_s, o.workspace_bytes)
    back = {o.id: [im.name for im in o.impls] for o in g.ops if o.kind == "convolution_backward"}
    # The first convolution's backward computes no input gradient (the input needs none): nothing to choose.
    # The second's is strided: Winograd does not apply.
    assert back == {"convolution_backward": [], "convolution_backward_1": []}
    assert not any(o.impls for o in g.ops if o.kind not in ("convolution", "convolution_backward"))


@pytest.mark.parametrize("padding", [0, 1, 2])
def test_backward_winograd_gives_the_library_gradients_within_tolerance(padding: int) -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(5, 6, 9, 8, generator=gen)
    w = torch.randn(7, 6, 3, 3, generator=gen) / 54 ** 0.5
    g = torch.randn(5, 7, 9 + 2 * padding - 2, 8 + 2 * padding - 2, generator=gen)
    args = [g, x, w, [7], [1, 1], [padding, padding], [1, 1], False, [0, 0], 1, [True, True, True]]
    ref = torch.ops.aten.convolution_backward.default(*args)
    for name in ("winograd", "winograd_chunk4"):
        gi, gw, gb = run_impl("convolution_backward", name, args, {})
        assert torch.allclose(gi, ref[0], rtol=RTOL, atol=ATOL)
        assert torch.equal(gw, ref[1]) and torch.equal(gb, ref[2])   # the library call's own
    with pytest.raises(HybridError, match="input gradient"):
        run_impl("convolution_backward", "winograd", args[:10] + [[False, True, True]], {})


def test_capture_offers_backward_winograd_on_a_deep_layer() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.Flatten(),
                      nn.Linear(8 * 6 * 6, 2))
    g = capture(m, torch.randn(4, 3, 6, 6), nn.functional.cross_entropy, torch.randint(2, (4,)), optimizer="sgd")
    names = {o.id: [im.name for im in o.impls] for o in g.ops if o.kind == "convolution_backward"}
    assert sorted(names.values()) == [[], ["default", "winograd", "winograd_chunk4"]]


def test_replay_runs_the_named_impl_default_bitwise_others_within_tolerance() -> None:
    from hybrid.capture.conv_impls import STEP_ATOL, STEP_RTOL

    m, x, y, lf = _net()
    g = capture(m, x, lf, y, optimizer="sgd")
    default = replay_step(g, m, x, y, impls={"convolution": "default"})
    plain = replay_step(g, m, x, y)
    assert mismatches(default, plain) == []           # naming the default is the recorded call, bitwise
    alt = replay_step(g, m, x, y, impls={"convolution": "winograd", "convolution_1": "unfold_gemm"})
    assert mismatches(alt, plain) != []               # another summation order: not bitwise...
    assert mismatches(alt, plain, rtol=STEP_RTOL, atol=STEP_ATOL) == []   # ...but within the stated tolerance
    with pytest.raises(HybridError, match="has no implementation 'winograd'"):
        replay_step(g, m, x, y, impls={"convolution_1": "winograd"})


def test_profile_measures_each_impl_and_a_cuda_profile_retimes_them() -> None:
    from hybrid.capture.profile import Profile, apply_profile, impl_signature, measure_profile, op_signature

    m, x, y, lf = _net()
    g = capture(m, x, lf, y, optimizer="sgd")
    conv = g.op("convolution")
    prof, rep = measure_profile(g, backend="cpu", repeat=1, warmup=0)
    sig = op_signature(g, conv)
    assert sig in prof.entries
    for name in ("unfold_gemm", "winograd", "winograd_chunk4"):
        e = prof.entries[impl_signature(sig, name)]
        assert e["impl"] == name and e["time_s"] > 0
    g_cpu = apply_profile(g, prof)          # cpu: impl times recorded beside, GPU impl times kept
    c = g_cpu.op("convolution")
    assert c.impls == conv.impls and set(c.extra["cost"]["cpu_impl_time_s"]) == {im.name for im in conv.impls}
    # A cuda profile sets each impl's time; the default takes the op's own, so it stays the default.
    cuda = Profile("cuda", "test GPU", {k: dict(v) for k, v in prof.entries.items()})
    g_gpu = apply_profile(g, cuda)
    c = g_gpu.op("convolution")
    assert c.time_s == prof.entries[sig]["time_s"] and c.impls[c.default_impl].name == "default"
    assert c.impls[2].time_s == prof.entries[impl_signature(sig, "winograd")]["time_s"]
    assert c.extra["cost"]["impl_time_s_source"]["winograd"] == "profile"
