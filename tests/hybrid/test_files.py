"""The one atomic writer (hybrid.files): whole or not at all, whatever stops the write."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hybrid import files
from hybrid.errors import HybridError
from hybrid.files import MARK, atomic_open, write_whole

ROOT = Path(__file__).resolve().parents[2]


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if MARK in p.name)


def test_replaces_the_file_and_leaves_no_temporary(tmp_path) -> None:
    target = tmp_path / "plan.json"
    target.write_text("old")
    os.chmod(target, 0o640)
    write_whole(target, "new")
    assert target.read_text() == "new"
    assert oct(target.stat().st_mode & 0o777) == oct(0o640)  # the old file's permissions are kept
    write_whole(tmp_path / "b.bin", b"\x00\x01")
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    assert temporaries(tmp_path) == []


def test_an_exception_while_writing_keeps_the_old_file_and_removes_the_temporary(tmp_path) -> None:
    target = tmp_path / "log.csv"
    target.write_text("a,b\n1,2\n")
    with pytest.raises(RuntimeError):
        with atomic_open(target, "w") as f:
            f.write("half a row")
            raise RuntimeError("writer failed")
    assert target.read_text() == "a,b\n1,2\n"
    assert temporaries(tmp_path) == []


def test_a_full_disk_is_one_line_naming_the_path_and_the_old_file_stays(tmp_path, monkeypatch) -> None:
    target = tmp_path / "table.csv"
    target.write_text("old table\n")

    def full(fd: int) -> None:  # where a full disk surfaces with delayed allocation
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full)
    with pytest.raises(HybridError) as e:
        write_whole(target, "x" * 100_000)
    assert str(target) in str(e.value) and "no space left" in str(e.value) and "\n" not in str(e.value)
    assert target.read_text() == "old table\n"
    assert temporaries(tmp_path) == []
    monkeypatch.undo()
    with pytest.raises(HybridError, match="no space left"):  # ENOSPC raised by the writer itself, mid-row
        with atomic_open(target, "w") as f:
            f.write("1,2,")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert target.read_text() == "old table\n" and temporaries(tmp_path) == []


def test_a_symlink_is_written_through(tmp_path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_whole(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_read_only_targets_and_folders_are_refused(tmp_path) -> None:
    target = tmp_path / "keep.json"
    target.write_text("precious")
    os.chmod(target, 0o444)
    with pytest.raises(HybridError, match="read-only") as e:
        write_whole(target, "overwritten")
    assert str(target) in str(e.value)
    assert target.read_text() == "precious"
    link = tmp_path / "to-keep.json"
    link.symlink_to(target)
    with pytest.raises(HybridError, match="read-only"):
        write_whole(link, "overwritten")
    with pytest.raises(HybridError, match="is a folder"):
        write_whole(tmp_path, "x")
    assert temporaries(tmp_path) == []


def test_a_name_too_long_is_one_line(tmp_path) -> None:
    target = tmp_path / ("p" * 300 + ".json")
    with pytest.raises(HybridError, match="too long") as e:
        write_whole(target, "x")
    assert "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []
    long_ok = tmp_path / ("q" * 250 + ".json")  # a name the file system takes: its temporary's name is cut short
    write_whole(long_ok, "x")
    assert long_ok.read_text() == "x" and temporaries(tmp_path) == []


def test_two_writers_of_one_path_never_share_a_temporary(tmp_path) -> None:
    target = tmp_path / "ga.ckpt"
    with atomic_open(target, "wb") as a, atomic_open(target, "wb") as b:
        a.write(b"first")
        b.write(b"second")
        assert a.name != b.name
    assert target.read_bytes() == b"first"  # renamed last: the outer one; both whole
    assert temporaries(tmp_path) == []


_SLOW_WRITER = """
import sys, time
from hybrid.files import atomic_open
with atomic_open(sys.argv[1], "wb") as f:
    for _ in range(4000):
        f.write(b"y" * 65536)
        f.flush()
        time.sleep(0.001)
"""


def _start_slow_writer(target: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _SLOW_WRITER, str(target), *args], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def _wait_for_temporary(folder: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while not any((folder / t).stat().st_size > 1 << 20 for t in temporaries(folder)):
        assert proc.poll() is None and time.monotonic() < deadline, "the writer never started writing"
        time.sleep(0.05)


def test_sigkill_mid_write_leaves_the_old_file_whole_and_the_next_write_removes_the_temporary(tmp_path) -> None:
    target = tmp_path / "big.bin"
    old = os.urandom(1 << 20)
    target.write_bytes(old)
    proc = _start_slow_writer(target)
    try:
        _wait_for_temporary(tmp_path, proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert target.read_bytes() == old
    left = temporaries(tmp_path)
    assert len(left) == 1 and left[0].startswith(f".big.bin{MARK}{proc.pid}-") and left[0].endswith(".tmp")
    write_whole(target, b"next")  # its writer is gone: swept
    assert target.read_bytes() == b"next" and temporaries(tmp_path) == []


def test_a_second_signal_exits_at_once_and_removes_the_temporary(tmp_path) -> None:
    target = tmp_path / "big.bin"
    target.write_bytes(b"old")
    code = "from hybrid.signals import install, first_stop_sets, handling_stops; install()\n" \
           "with handling_stops(), first_stop_sets(lambda s: None):\n" + "\n".join("    " + line for line in _SLOW_WRITER.splitlines())
    proc = subprocess.Popen([sys.executable, "-c", code, str(target)], cwd=ROOT, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        _wait_for_temporary(tmp_path, proc)
        proc.send_signal(signal.SIGTERM)   # noted (the block goes on)
        time.sleep(1.0)                    # past REPEAT_S: a second stop, not the first delivered twice
        proc.send_signal(signal.SIGTERM)   # exits at once
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert "interrupted again (SIGTERM)" in err and "Traceback" not in err
    assert target.read_bytes() == b"old" and temporaries(tmp_path) == []
