"""`--resume` with a file that is not a GA checkpoint, or one made for another device: one line saying so (and
why), never numpy's text about allow_pickle nor two whole device dicts."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from click.testing import CliRunner

from ga import GAConfig, optimize
from hybrid.cli.main import cli
from hybrid.errors import HybridError
from tests.ga.graphs import small_training

SMALL = GAConfig(population=8, children=8, seed=3)
NOT_OURS = r"is not a GA checkpoint written by `hybrid optimize --checkpoint` \("


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A graph, its device and a real checkpoint of one generation."""
    g, dev = small_training(12, seed=4)
    ck = tmp_path_factory.mktemp("ck") / "ga.ckpt"
    optimize(g, dev, SMALL, generations=1, checkpoint=ck)
    return g, dev, ck


def _edited(src: Path, dst: Path, edit: Callable[[dict[str, Any], dict[str, Any]], None]) -> Path:
    """A copy of checkpoint `src` with `edit(header, arrays)` applied, written as an npz at `dst`."""
    with np.load(src, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(str(arrays.pop("header")))
    edit(header, arrays)
    if "header" not in arrays:
        arrays["header"] = np.array(json.dumps(header))
    with open(dst, "wb") as f:
        np.savez(f, **arrays)
    return dst


def _text(src: Path, dst: Path) -> Path:
    dst.write_text("this is a text file\n")
    return dst


def _empty(src: Path, dst: Path) -> Path:
    dst.write_bytes(b"")
    return dst


def _npy(src: Path, dst: Path) -> Path:
    with open(dst, "wb") as f:
        np.save(f, np.arange(4))
    return dst


def _truncated(src: Path, dst: Path) -> Path:
    data = src.read_bytes()
    dst.write_bytes(data[:len(data) // 2])
    return dst


def _scribbled(src: Path, dst: Path) -> Path:
    data = bytearray(src.read_bytes())
    data[60:200] = bytes(140)   # inside the first member's compressed bytes
    dst.write_bytes(bytes(data))
    return dst


def _other_npz(src: Path, dst: Path) -> Path:
    with open(dst, "wb") as f:
        np.savez(f, weights=np.zeros(3))
    return dst


def _edit(fn: Callable[[dict[str, Any], dict[str, Any]], None]) -> Callable[[Path, Path], Path]:
    return lambda src, dst: _edited(src, dst, fn)


def _pickled_header(h: dict[str, Any], a: dict[str, Any]) -> None:
    a["header"] = np.array([h], dtype=object)


def _text_header(h: dict[str, Any], a: dict[str, Any]) -> None:
    a["header"] = np.array("not json")


NOT_CHECKPOINTS = [
    ("text-file", _text, r"not a zip/npz file"),
    ("empty-file", _empty, r"not a zip/npz file"),
    ("npy-not-npz", _npy, r"not a zip/npz file"),
    ("truncated", _truncated, r"a damaged or truncated zip/npz file"),
    ("scribbled", _scribbled, r"a damaged or truncated zip/npz file"),
    ("another-npz", _other_npz, r"no 'header' array"),
    ("pickled-header", _edit(_pickled_header), r"it holds pickled Python objects"),
    ("header-not-json", _edit(_text_header), r"its header is not a JSON object"),
    ("no-cls-array", _edit(lambda h, a: a.pop("cls")), r"no 'cls' array"),
    ("other-format", _edit(lambda h, a: h.update(format="something-else/3")),
     r"format 'something-else/3', expected 'hybrid-ga-checkpoint/1'"),
    ("no-rng", _edit(lambda h, a: h.pop("rng")), r"its header has no 'rng' field"),
    ("flat-schedules", _edit(lambda h, a: a.update(schedules=a["schedules"].ravel())),
     r"array 'schedules' is int32 with 1 dimensions"),
    ("float-planner", _edit(lambda h, a: a.update(planner=a["planner"].astype(float))), r"array 'planner' is float64"),
    ("one-makespan-too-many", _edit(lambda h, a: a.update(makespans=np.append(a["makespans"], 1.0))),
     r"its arrays disagree on the number of individuals"),
    ("bad-cnt-ptr", _edit(lambda h, a: a.update(cnt_ptr=a["cnt_ptr"] + 5)),
     r"its arrays disagree on the number of individuals"),
    ("bad-rng", _edit(lambda h, a: h.update(rng={"bit_generator": "nope"})), r"its header's rng is not what"),
    ("bad-log", _edit(lambda h, a: h.update(log=[{"nope": 1}])), r"its header's log is not what"),
    ("bad-generation", _edit(lambda h, a: h.update(generation="three")), r"its header's generation"),
    ("bad-config", _edit(lambda h, a: h.update(config=[1, 2])), r"its header's config is not what"),
]


@pytest.mark.parametrize("make, why", [c[1:] for c in NOT_CHECKPOINTS], ids=[c[0] for c in NOT_CHECKPOINTS])
def test_a_file_that_is_not_a_checkpoint_is_refused_saying_why(made, tmp_path, make, why) -> None:
    g, dev, ck = made
    bad = make(ck, tmp_path / "bad.ckpt")
    with pytest.raises(HybridError, match=NOT_OURS + why) as e:
        optimize(g, dev, SMALL, generations=2, resume=bad)
    assert "\n" not in str(e.value) and "allow_pickle" not in str(e.value)


def test_a_newer_checkpoint_format_says_which_version_reads_it(made, tmp_path) -> None:
    g, dev, ck = made
    bad = _edited(ck, tmp_path / "new.ckpt", lambda h, a: h.update(format="hybrid-ga-checkpoint/2"))
    with pytest.raises(HybridError, match=r"checkpoint format 'hybrid-ga-checkpoint/2'; this version reads "
                                          r"'hybrid-ga-checkpoint/1'"):
        optimize(g, dev, SMALL, generations=2, resume=bad)


@pytest.mark.parametrize("changes", [{"memory_bytes": 2}, {"memory_bytes": 2, "h2d_bytes_per_s": 0.5}],
                         ids=["memory", "memory-and-h2d"])
def test_a_device_mismatch_names_the_fields_that_differ(made, changes) -> None:
    g, dev, ck = made
    other = replace(dev, **{k: type(getattr(dev, k))(getattr(dev, k) * f) for k, f in changes.items()})
    with pytest.raises(HybridError, match="the checkpoint was made for another device") as e:
        optimize(g, other, SMALL, generations=2, resume=ck)
    msg = str(e.value)
    for k in changes:
        assert f"{k} {getattr(dev, k)!r} in the checkpoint, {getattr(other, k)!r} here" in msg
    assert "{" not in msg and "d2h_bytes_per_s" not in msg and "alignment_bytes" not in msg


def test_another_graph_names_both_graphs(made) -> None:
    g, dev, ck = made
    g2, dev2 = small_training(10, seed=5)
    with pytest.raises(HybridError, match=rf"another graph file \(graph '{g.name}', sha256 \w{{12}}\.\.\. in the "
                                          rf"checkpoint; '{g2.name}', sha256 \w{{12}}\.\.\. here\)"):
        optimize(g2, dev2, SMALL, generations=2, resume=ck)


def test_the_command_prints_one_line_for_a_text_file_and_a_device_mismatch(made, tmp_path) -> None:
    g, dev, ck = made
    graph = tmp_path / "g.json"
    g.save(graph)
    bad = _text(ck, tmp_path / "bad.json")
    common = ["optimize", "--graph", str(graph), "--population", "8", "--workers", "1", "--refine", "none",
              "--no-arena", "--quiet", "--time-limit", "5s", "--out", str(tmp_path / "p.json")]
    r = CliRunner().invoke(cli, [*common, "--memory", str(dev.memory_bytes), "--resume", str(bad)])
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines() == [
        f"error: --resume {bad} is not a GA checkpoint written by `hybrid optimize --checkpoint` (not a zip/npz file); "
        "give the file that flag wrote"]
    r = CliRunner().invoke(cli, [*common, "--memory", str(2 * dev.memory_bytes), "--resume", str(ck)])
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1
    assert f"memory_bytes {dev.memory_bytes} in the checkpoint, {2 * dev.memory_bytes} here" in r.output
    assert not (tmp_path / "p.json").exists()


def test_a_real_checkpoint_still_resumes(made) -> None:
    g, dev, ck = made
    assert optimize(g, dev, SMALL, generations=2, resume=ck).generations == 2
