"""What a new user's review found in `hybrid execute`'s, `hybrid info`'s and `hybrid baseline`'s words: the run's
peak set against the plan's usable memory (not the device's memory with its reserve), the pool-and-outside figure
named as the sum it is, counts in their number ("1 iteration"), a floor never rounded down, a folder that exists
but takes no files said as such, and the kinds `baseline` skipped named in a warning."""
from __future__ import annotations

import errno
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from hybrid.device import Device
from tests.cli.helpers import run as run_here

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "resnet18-b32.json"
MIB = 1 << 20
GIB = 1 << 30


def _summary(**kw: Any) -> Any:
    from executor.measure import Summary

    pool = {"kind": "arena", "peak_live_bytes": 3 * MIB, "alignment_bytes": 64, "reserved_bytes": 4 * MIB}
    base = dict(outside_counted_by="dispatch", pool_peak_occupied_bytes=4 * MIB,
                memory={"plan_memory_bytes": 4 * MIB + GIB, "pool": pool, "host_pool_bytes": 0, "pinned": False})
    return Summary(1, 0, 0.001, 0.001, 0.001, None, 1.0, **{**base, **kw})


def _lines(s: Any, device: Device) -> list[str]:
    pytest.importorskip("torch")
    from hybrid.cli.commands.execute import _lines as lines

    plan = SimpleNamespace(planner={"name": "belady"}, device=device)
    return lines(SimpleNamespace(name="g"), plan, SimpleNamespace(summary=s, losses=[]), "cpu")


RESERVED = Device("captured", 4 * MIB + GIB, 1e10, 1e10, reserve_bytes=GIB)   # 4 MiB usable, a 1 GiB reserve


# ---- 1. the run's peak against the plan's usable memory ---------------------------------------------------

def test_a_cpu_run_over_the_usable_memory_is_warned_though_within_the_reserve() -> None:
    from executor.api import outside_warning

    s = _summary(peak_with_outside_bytes=4 * MIB + 230 * (1 << 10))       # 4.22 MiB held, 4 MiB usable
    lines = _lines(s, RESERVED)
    assert lines[0].endswith("(arena pool, 4 MiB usable, 1 GiB with its 1 GiB reserve) on cpu: 1 iteration")
    mem = next(ln for ln in lines if ln.startswith("  device memory:"))
    assert "of the plan's 4 MiB usable (buffer 4 MiB)" in mem and "1 GiB" not in mem
    warn = [ln for ln in lines if ln.startswith("  warning:")]
    assert len(warn) == 1 and "held 4.22 MiB, 230 KiB over the plan's 4 MiB usable:" in warn[0]
    assert outside_warning(s, 4 * MIB + GIB) is None       # the device's whole memory would have hidden it


def test_a_cuda_peak_is_set_against_the_memory_with_its_reserve_named() -> None:
    from executor.api import peak_warning

    mem = {"cuda_own_peak_bytes": 2 * GIB, "cuda_kernel_state_bytes": 33 * MIB}
    line = peak_warning(mem, GIB + 4 * MIB, GIB)
    assert line is not None and "over the plan's 1 GiB with its 1 GiB reserve:" in line


# ---- 2. the pool and the outside allocations named as the sum they are -----------------------------------

def test_the_pool_and_outside_figure_says_it_is_a_sum_and_what_the_outside_added() -> None:
    lines = _lines(_summary(peak_with_outside_bytes=4 * MIB), RESERVED)
    mem = next(ln for ln in lines if ln.startswith("  device memory:"))
    assert ("pool and outside allocations together at their peak 4 MiB (no more than the pool's peak alone)"
            in mem), mem
    assert "allocated outside the pool at the same time" not in mem
    mem = next(ln for ln in _lines(_summary(peak_with_outside_bytes=5 * MIB), RESERVED)
               if ln.startswith("  device memory:"))
    assert "pool and outside allocations together at their peak 5 MiB (1 MiB above the pool's peak)" in mem
    mem = next(ln for ln in _lines(_summary(outside_counted_by="", peak_with_outside_bytes=5 * MIB), RESERVED)
               if ln.startswith("  device memory:"))
    assert "pool peak and the copy fallback's largest result together at most 5 MiB (outside the pool not " in mem


# ---- 7. counts in their number ---------------------------------------------------------------------------

def test_one_of_a_thing_is_said_in_the_singular() -> None:
    s = _summary(peak_with_outside_bytes=4 * MIB)
    s.memory["pool"].update(compactions_per_iteration=1, moved_bytes_per_iteration=MIB)
    lines = _lines(replace(s, graphed=1), RESERVED)
    assert lines[0].endswith(": 1 iteration")
    assert any(ln.startswith("  1 iteration replayed as CUDA graphs") for ln in lines), lines
    assert "; 1 compaction per iteration moving 1 MiB" in "\n".join(lines)


def test_check_lines_count_one_value_in_the_singular() -> None:
    pytest.importorskip("torch")
    from executor.check import Comparison

    c = SimpleNamespace(bitwise=True, values=1, compared="outputs", inference=True)
    assert Comparison.line(c) == "check: 1 value (outputs) equals eager inference bitwise"
    c = SimpleNamespace(bitwise=False, ok=True, one_sided=["a"], only_eager=["a"], only_run=[], mismatched=[],
                        both_sides=1, atol=0.0, rtol=0.0)
    assert Comparison.line(c).startswith("check: 1 value on one side only (a only in eager's); the 1 value on "
                                         "both sides equals bitwise;")


# ---- 5. a floor is never rounded down --------------------------------------------------------------------

def test_info_prints_the_largest_ops_bytes_rounded_up() -> None:
    from hybrid.graph.info import GraphInfo

    info = GraphInfo("g", 1, 1, 1, {}, 0, 8 * MIB, "conv", 4_198_016, 0.0, 0.0, 16 * MIB, 16 * MIB)
    row = dict(info.rows())["largest single op (ins+outs+workspace)"]
    assert row.startswith("4.01 MiB (4198016 B, conv): no plan runs with less memory"), row


@pytest.mark.parametrize("n, text", [(4 * MIB, "4 MiB"), (4 * MIB + 1, "4.01 MiB"), (1023 * 1024 + 600, "1 MiB"),
                                     (1000, "1000 B"), (1025, "1.01 KiB"), (int(9.991 * MIB), "10 MiB")])
def test_bytes_rounded_up_never_read_below_the_bytes(n: int, text: str) -> None:
    from hybrid.units import format_bytes_up
    from hybrid.units import parse_bytes

    assert format_bytes_up(n) == text and parse_bytes(text) >= n


# ---- 6. a folder that exists but takes no new files ------------------------------------------------------

def test_a_file_the_os_refuses_in_an_existing_folder_is_not_said_to_lack_its_folder(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch
                                                                                   ) -> None:
    import tempfile

    from hybrid.errors import HybridError
    from hybrid.files import write_whole

    def refuse(*a: Any, **k: Any) -> Any:      # what /proc answers: ENOENT, though the folder is there
        raise FileNotFoundError(errno.ENOENT, "No such file or directory")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(HybridError) as e:
        write_whole(tmp_path / "x.json", "{}")
    assert f"cannot create files in {tmp_path}" in str(e.value) and "does not exist" not in str(e.value)
    monkeypatch.undo()
    with pytest.raises(HybridError, match="its folder .* does not exist"):
        write_whole(tmp_path / "gone" / "x.json", "{}")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="Linux /proc")
def test_writing_into_proc_says_the_folder_takes_no_files() -> None:
    from hybrid.errors import HybridError
    from hybrid.files import write_whole

    with pytest.raises(HybridError, match="cannot create files in /proc"):
        write_whole("/proc/hybrid-review-x.json", "{}")


# ---- 8. baseline: the kinds skipped, named in a warning --------------------------------------------------

def test_baseline_names_the_kinds_it_skipped_in_a_warning(tmp_path: Path) -> None:
    r = run_here("baseline", "--graph", EXAMPLE, "--memory", "30MiB", "--kind", "naive", "--kind", "vdnn",
                 "--no-arena", "--out", tmp_path / "b")
    assert r.exit_code == 0, r.output
    warn = [ln for ln in r.output.splitlines() if ln.startswith("warning:")]
    assert len(warn) == 1 and warn[0].startswith("warning: --kind vdnn skipped, no plan written (vdnn.json): the "
                                                 "persistent tensors"), warn
    assert warn[0].endswith("give more --memory; the other kinds ran"), warn
    assert (tmp_path / "b" / "naive.json").exists() and not (tmp_path / "b" / "vdnn.json").exists()


# ---- 1, end to end: a captured graph's plan with its 1 GiB reserve, run on the CPU ----------------------

@pytest.fixture()
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    pytest.importorskip("torch")
    from tests.cli.test_execute_new_user_cli import FACTORY

    (tmp_path / "nunet.py").write_text(textwrap.dedent(FACTORY))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("nunet", None)
    yield tmp_path
    sys.modules.pop("nunet", None)


@pytest.mark.torch
def test_execute_warns_against_the_usable_memory_of_a_plan_with_a_reserve(here: Path) -> None:
    from hybrid.graph import Graph
    from hybrid.graph.info import graph_alignment, largest_op, unswapped_peak
    from hybrid.swap.baselines import run_baseline
    from hybrid.units import format_bytes

    assert run_here("capture", "--module", "nunet:make", "--optimizer", "sgd", "--out", "g.json").exit_code == 0
    g = Graph.load("g.json")
    usable = max(largest_op(g, graph_alignment(g))[1] + 4096, int(0.7 * unswapped_peak(g)))
    run_baseline(g, replace(g.device, memory_bytes=usable + GIB, reserve_bytes=GIB), "belady").save("p.json")
    r = run_here("execute", "--graph", "g.json", "--plan", "p.json", "--module", "nunet:make", "--device", "cpu",
                 "--iters", "1")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    mem = next(ln for ln in lines if ln.startswith("  device memory:"))
    assert f"of the plan's {format_bytes(usable)} usable (buffer" in mem, mem
    # batch norm's backward allocates beyond the plan's usable memory: warned, though far within its 1 GiB reserve
    assert any(ln.startswith("  warning: with what it allocated outside the pool this run held") and
               f"over the plan's {format_bytes(usable)} usable:" in ln for ln in lines), lines
    assert any(ln.startswith("executed ") and ln.endswith(": 1 iteration") for ln in lines), lines


def test_an_output_folder_whose_file_system_refuses_new_files_is_refused_before_the_work(tmp_path,
                                                                                         monkeypatch) -> None:
    """os.access passes for root on /proc: the refusal came only when the plan was written, after the search."""
    import tempfile

    from hybrid.cli.options import prepare_output
    from hybrid.errors import HybridError

    def refuse(*a, **k):  # noqa: ANN002, ANN003, ANN202 - what /proc answers for a new file
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(HybridError, match=r"--out: cannot write .*p\.json: cannot create files in .* \(the folder "
                                          r"exists, but its file system refuses new files\)"):
        prepare_output(tmp_path / "p.json", "--out")
