"""Roofline costs and profiles: the arithmetic, the presets, and how measured times replace estimates."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hybrid.capture import costs
from hybrid.device import HOST_CPUS, HOST_OF, PRESET_COMPUTE, PRESETS
from hybrid.errors import FormatError, HybridError


def test_roofline_is_max_of_compute_and_memory_plus_launch() -> None:
    spec = PRESET_COMPUTE["v100-16gb"]
    # 2 GFLOP of fp32 matmul on 1 KB: compute-bound.
    t = costs.roofline_s(2e9, 1e3, "float32", "matmul", spec)
    assert t == pytest.approx(2e9 / 15.7e12 + 5e-6)
    # 1 GB of element-wise traffic: memory-bound.
    t = costs.roofline_s(1e6, 1e9, "float32", "vector", spec)
    assert t == pytest.approx(1e9 / 900e9 + 5e-6)
    assert costs.roofline_s(0, 0, "float32", "alloc", spec) == 0.0


def test_tensor_cores_and_tf32_where_pytorch_uses_them() -> None:
    a100 = PRESET_COMPUTE["a100-40gb"]
    assert a100.peak("float32", "matmul") == 19.5e12          # matmul TF32 off by default
    assert a100.peak("float32", "conv") == 156e12             # cuDNN TF32 on by default
    assert a100.peak("bfloat16", "matmul") == 312e12
    assert a100.peak("bfloat16", "vector") == 39e12
    v100 = PRESET_COMPUTE["v100-16gb"]
    assert v100.peak("bfloat16", "matmul") == v100.peak("float32", "matmul")   # Volta has no bf16
    assert v100.peak("float16", "conv") == 125e12


def test_every_preset_has_both_parts_memory_and_link_and_compute() -> None:
    """A preset is defined in hybrid.device twice over: its memory and link (PRESETS) and its compute (its GPU
    in PRESET_COMPUTE, its host CPU through HOST_OF). Neither part may exist without the other."""
    assert set(PRESETS) == set(PRESET_COMPUTE) == set(HOST_OF)
    assert set(HOST_OF.values()) <= set(HOST_CPUS)
    for name in PRESETS:
        assert PRESETS[name].name == name
        m = costs.cost_model(name)
        assert m.gpu.mem_bytes_per_s > m.cpu.mem_bytes_per_s
        assert m.gpu.source and m.cpu.source
    with pytest.raises(HybridError, match="no compute figures"):
        costs.cost_model("tpu-v9")


def test_costs_module_and_package_import_without_torch() -> None:
    code = ("import sys; sys.modules['torch'] = None\n"
            "import hybrid, hybrid.capture, hybrid.capture.costs\n"
            "from hybrid.errors import HybridError\n"
            "try:\n"
            "    hybrid.capture.capture\n"
            "except HybridError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'hybrid-offload[torch]'" in out


def test_capture_command_without_torch_says_what_to_install() -> None:
    code = ("import sys; sys.modules['torch'] = None\n"
            "from click.testing import CliRunner\n"
            "from hybrid.cli.commands.capture import command\n"
            "r = CliRunner().invoke(command, ['--model', 'resnet-18', '--out', 'x.json'])\n"
            "print(type(r.exception).__name__, r.exception)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("HybridError ") and "pip install 'hybrid-offload[torch]'" in out


def test_profile_file_errors_name_the_problem(tmp_path) -> None:
    pytest.importorskip("torch")
    from hybrid.capture.profile import Profile

    p = tmp_path / "p.json"
    p.write_text(json.dumps({"format": "hybrid-graph/1"}))
    with pytest.raises(FormatError, match="hybrid-profile/1"):
        Profile.load(p)
    p.write_text(json.dumps({"format": "hybrid-profile/1", "backend": "cuda",
                             "entries": {"sig": {"time_s": -1, "target": "aten.mm.default"}}}))
    with pytest.raises(FormatError, match="aten.mm.default"):
        Profile.load(p)
    with pytest.raises(FormatError, match="cannot read"):
        Profile.load(tmp_path / "missing.json")
