"""benchmarks/gpu_session.sh, the GPU checks a session lent a GPU runs in one or two device calls: it must not
fail on the GPU machine for a reason this machine can see (its syntax, its arguments, its stages' names)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = [ROOT / "benchmarks" / "gpu_session.sh", ROOT / "benchmarks" / "gpu_wheels.sh"]

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_parse(script: Path) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)


def _session(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(tmp_path / "out"), "GPU_SESSION_DEVICE": "cpu", "CALL_SECONDS": "120",
           "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPTS[0]), *args], env=env, capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def test_no_stage_prints_the_usage(tmp_path: Path) -> None:
    p = _session(tmp_path)
    assert p.returncode == 2 and "usage: bash benchmarks/gpu_session.sh STAGE" in p.stdout


def test_a_missing_solver_is_named_before_any_stage(tmp_path: Path) -> None:
    """On the GPU machine OR-Tools comes from the carried wheels: without them, one line says what to do."""
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": "false"}
    p = subprocess.run(["bash", str(SCRIPTS[0]), "smoke"], env=env, capture_output=True, text=True, timeout=60,
                       cwd=ROOT)
    assert p.returncode == 1 and "gpu_wheels.sh" in p.stdout


def test_an_unknown_stage_is_named(tmp_path: Path) -> None:
    p = _session(tmp_path, "smok")
    assert "error: unknown stage 'smok'" in p.stdout
    assert "error: unknown stage 'smok'" in (tmp_path / "out" / "session.log").read_text()


def test_every_stage_the_header_names_exists() -> None:
    """The stages its header documents are the ones it runs (a typo there costs a device call)."""
    text = SCRIPTS[0].read_text()
    header = text.split("set -uo pipefail")[0]
    cases = {line.strip().rstrip(")") for line in text.splitlines() if line.startswith("    ") and
             line.strip().endswith(")") and line.strip()[:-1].isidentifier()}
    named = {"preflight", "smoke", "vs_torch", "executor", "compile", "sanitizer"}
    assert named <= cases
    assert all(f"#   {s} " in header for s in named)


def test_a_stage_cap_ends_that_stage_and_leaves_the_call_to_the_next(tmp_path: Path) -> None:
    """<STAGE>_SECONDS caps one stage (here too short to start it), the next stage still runs within the call."""
    env = {**os.environ, "OUT": str(tmp_path / "out"), "GPU_SESSION_DEVICE": "cpu", "CALL_SECONDS": "120",
           "PYTHON": sys.executable, "EXECUTOR_SECONDS": "10"}
    p = subprocess.run(["bash", str(SCRIPTS[0]), "executor", "smok"], env=env, capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    log = (tmp_path / "out" / "session.log").read_text()
    # the seconds left are the cap less the stage's start-up, which a loaded machine makes longer (9 s was seen)
    left = re.search(r"skipped: (\d+) s left of the stage's cap", log)
    assert "=== executor" in log and left is not None and int(left.group(1)) <= 10, log
    assert "error: unknown stage 'smok'" in p.stdout     # the stage after it was reached


def test_a_stage_that_wrote_no_table_brings_back_no_earlier_one(tmp_path: Path) -> None:
    """The stage moves the tables it wrote under results/ to $OUT; a table already there (on the GPU machine:
    the committed one, copied with the working tree) must not come back as if this call had measured it."""
    table = ROOT / "results" / "vs_torch_measured_quick.md"     # the CPU run's name (the GPU's: no _quick)
    if table.exists():
        pytest.skip(f"{table.name} exists here")
    table.write_text("an earlier table\n")
    os.utime(table, (1_000_000_000, 1_000_000_000))
    try:
        env = {**os.environ, "OUT": str(tmp_path / "out"), "GPU_SESSION_DEVICE": "cpu", "CALL_SECONDS": "120",
               "PYTHON": sys.executable, "VS_TORCH_SECONDS": "10"}
        subprocess.run(["bash", str(SCRIPTS[0]), "vs_torch"], env=env, capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
        log = (tmp_path / "out" / "session.log").read_text()
        assert "=== vs_torch" in log and "left of the stage's cap" in log      # it ran nothing
        assert table.exists() and not (tmp_path / "out" / table.name).exists()
    finally:
        table.unlink(missing_ok=True)


def test_the_preflight_stage_runs_without_cuda_and_leaves_the_convolution_slots_on(tmp_path: Path) -> None:
    """Without CUDA the preflight says so and passes: the stages after it keep the CUDA convolution slot writer
    (on a GPU where its bits are not eager's, the stage exports HYBRID_CUDA_CONV_SLOTS=0 for them instead)."""
    p = _session(tmp_path, "preflight", "smok")
    log = (tmp_path / "out" / "session.log").read_text()
    assert "gpu_preflight: no CUDA device: skipped" in log
    assert "HYBRID_CUDA_CONV_SLOTS=0" not in log
    assert "error: unknown stage 'smok'" in p.stdout     # the stage after it was reached


def test_a_profile_cache_measures_an_op_signature_once_per_device_and_torch(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks.common.measured_profile: the GPU benchmarks reuse op times an earlier session measured on the
    same card and torch (a lent GPU's minutes are few), keyed so another card's or torch's are never read."""
    pytest.importorskip("torch")
    import torch

    from benchmarks.common import PROFILE_CACHE_ENV, measured_profile, profile_cache_path
    from hybrid.capture import capture

    m = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    g = capture(m, (torch.randn(4, 6),), torch.nn.functional.cross_entropy, torch.tensor([0, 1, 0, 1]),
                optimizer="sgd")
    monkeypatch.delenv(PROFILE_CACHE_ENV, raising=False)
    _, rep, note = measured_profile(g, "cpu", repeat=1, warmup=0)            # no cache: all measured
    assert rep.measured > 0 and "reused" not in note
    cache = tmp_path / "profiles"
    _, first, note = measured_profile(g, "cpu", cache, repeat=1, warmup=0)
    assert first.measured == rep.measured and "saved as" in note
    files = list(cache.iterdir())
    assert len(files) == 1 and files[0].name.startswith("cpu-")
    assert f"torch{torch.__version__.split('+')[0]}" in files[0].name
    monkeypatch.setenv(PROFILE_CACHE_ENV, str(cache))                         # as gpu_session.sh passes it
    _, again, note = measured_profile(g, "cpu", repeat=1, warmup=0)
    assert again.measured == 0 and again.reused == first.measured and "reused from" in note
    other = profile_cache_path(cache, "cuda", "NVIDIA H100 80GB HBM3", "2.11.0+cu130")
    assert other.name == "cuda-nvidia-h100-80gb-hbm3-torch2.11.0-cu130-v1.json" and not other.exists()


def test_the_preflight_reports_a_slot_writer_that_differs_or_writes_through_a_copy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks.gpu_preflight.conv_slots on the CPU with cuDNN and the device's allocator stood in for: a writer
    computing eager's bits into the slot passes, one whose bits differ or that allocates a result beside the slot
    is named (then gpu_session.sh runs the session with the copy fallback)."""
    pytest.importorskip("torch")
    import torch

    import benchmarks.gpu_preflight as pf

    class Backend:
        name = "Cudnn"

    def cudnn_out(x, w, padding, stride, dilation, groups, benchmark, deterministic, tf32, out):  # noqa: ANN001
        return out.copy_(torch.ops.aten.convolution.default(x, w, None, stride, padding, dilation, False, [0, 0],
                                                            groups))

    def peak_above(dev, fn):  # noqa: ANN001, ANN202 - a fresh result counts, a slot written in place does not
        res = fn()
        return res.numel() * res.element_size() if isinstance(res, torch.Tensor) else 0

    monkeypatch.setattr(torch._C, "_select_conv_backend", lambda *a: Backend())
    monkeypatch.setattr(torch._C, "_conv_determine_backend_memory_format", lambda x, w, b: torch.contiguous_format,
                        raising=False)
    monkeypatch.setattr(pf, "_peak_above", peak_above)
    monkeypatch.setattr(pf, "SHAPES", [s for s in pf.SHAPES if not s[-1]][:3])   # the CPU adds a bias otherwise
    with mock.patch("torch.ops.aten.cudnn_convolution", mock.Mock(out=cudnn_out)):
        assert pf.conv_slots(torch.device("cpu")) == []
    with mock.patch("torch.ops.aten.cudnn_convolution", mock.Mock(out=lambda *a, out: out.zero_())):
        failed = pf.conv_slots(torch.device("cpu"))
    assert len(failed) == 3 and all("differs from eager" in f for f in failed)
    # as much beside the slot as eager holds with its result, whatever the result's size: a copy's block
    monkeypatch.setattr(pf, "_peak_above", lambda dev, fn: (fn(), 8 << 20)[1])
    with mock.patch("torch.ops.aten.cudnn_convolution", mock.Mock(out=cudnn_out)):
        failed = pf.conv_slots(torch.device("cpu"))
    assert len(failed) == 3 and all("written through a copy" in f for f in failed)


def test_a_committed_profile_for_this_device_is_put_where_the_stages_reuse_it(tmp_path: Path) -> None:
    """gpu_session.sh copies the profile committed for this card and torch (benchmarks/profiles/, here a folder
    of the test's) into $OUT/profiles, which HYBRID_PROFILE_CACHE names for the stages; another card's is left."""
    pytest.importorskip("torch")
    from benchmarks.common import profile_cache_file

    committed = tmp_path / "committed"
    committed.mkdir()
    mine = profile_cache_file(committed, "cpu")
    mine.write_text('{"format": "hybrid-profile/1", "backend": "cpu", "device_name": "x", "entries": {}}')
    (committed / "cuda-another-card-torch0-v1.json").write_text("{}")
    env = {**os.environ, "OUT": str(tmp_path / "out"), "GPU_SESSION_DEVICE": "cpu", "CALL_SECONDS": "60",
           "PYTHON": sys.executable, "HYBRID_PROFILES": str(committed)}
    p = subprocess.run(["bash", str(SCRIPTS[0]), "smok"], env=env, capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert f"profiles: reusing {committed}/{mine.name}" in p.stdout
    assert sorted(f.name for f in (tmp_path / "out" / "profiles").iterdir()) == [mine.name]


def test_an_op_the_profiler_cannot_replay_keeps_its_modelled_time_and_the_rest_are_measured(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One op's failure of any kind (not only out of memory or a missing kernel) is that op's reason: a GPU
    session's profile goes on with the other ops instead of ending the stage."""
    pytest.importorskip("torch")
    import torch

    import hybrid.capture.profile as prof
    from hybrid.capture import capture

    m = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    g = capture(m, (torch.randn(4, 6),), torch.nn.functional.cross_entropy, torch.tensor([0, 1, 0, 1]),
                optimizer="sgd")
    real = prof._time_op
    seen: list[str] = []

    def flaky(op, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append(op.id)
        if len(seen) == 1:
            raise TypeError("an argument this profiler cannot rebuild")
        return real(op, *a, **k)

    monkeypatch.setattr(prof, "_time_op", flaky)
    profile, rep = prof.measure_profile(g, backend="cpu", repeat=1, warmup=0)
    assert rep.skipped == [seen[0]] and rep.reasons[seen[0]].startswith("TypeError: an argument")
    assert rep.measured == len(seen) - 1 > 0 and len(profile.entries) == rep.measured


def test_the_preflight_tells_a_crash_from_a_writer_that_is_not_eagers(monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture) -> None:
    """Exit 1: the writer's bits or bytes differ (gpu_session.sh then runs with the copy fallback, saying so);
    exit 2: the preflight itself crashed (the same fallback, the log saying it crashed, with the traceback)."""
    pytest.importorskip("torch")
    import benchmarks.gpu_preflight as pf

    def boom() -> int:
        raise ValueError("a bug in the preflight")

    monkeypatch.setattr(pf, "main", boom)
    assert pf._main() == 2
    err = capsys.readouterr()
    assert "ValueError: a bug in the preflight" in err.err and "gpu_preflight: crashed" in err.out
    monkeypatch.setattr(pf, "main", lambda: 1)
    assert pf._main() == 1
