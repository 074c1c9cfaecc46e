"""A read-only install with a read-only HOME: Numba's kernel cache falls back to a private temporary folder."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hybrid import _numba_cache
from tests.cli.helpers import RESNET

ROOT = Path(__file__).resolve().parents[2]
_SESSION_CACHE_DIR = os.environ.get("NUMBA_CACHE_DIR")   # at collection, before any test ran


def _drop_root_s_override() -> None:
    """Root without CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER (dropped from the bounding set, so exec
    does not grant them back): file permissions then bind it as they bind any user."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2, 3):
        if libc.prctl(24, cap, 0, 0, 0) != 0:        # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX permissions, Linux capabilities")
def test_a_read_only_install_and_home_run_with_numba_cache_dir_unset(tmp_path: Path) -> None:
    """`hybrid --help` and `hybrid info` from a copy of the packages that no one may write, with a read-only HOME
    and NUMBA_CACHE_DIR unset (before the fallback: a RuntimeError from Numba on import).

    Root ignores write permissions, so when the tests run as root the command runs without the capabilities
    that let it (CAP_DAC_OVERRIDE and two more, dropped in preexec_fn); as any other user the read-only bits
    alone make the folders unwritable."""
    pkg, home, tmp = tmp_path / "pkg", tmp_path / "home", tmp_path / "tmp"
    for name in ("hybrid", "ga", "milp", "executor"):
        shutil.copytree(ROOT / name, pkg / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(RESNET, tmp_path / RESNET.name)
    home.mkdir()
    tmp.mkdir()
    ro = [pkg, home, *pkg.rglob("*")]
    for p in ro:
        os.chmod(p, stat.S_IMODE(os.lstat(p).st_mode) & ~0o222)
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), TMPDIR=str(tmp), PYTHONPATH=str(pkg))
    root = os.geteuid() == 0

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "hybrid.cli.main", *args], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path, env=env, preexec_fn=_drop_root_s_override if root else None)

    try:
        r = run("--help")
        assert r.returncode == 0, r.stderr
        assert "validate" in r.stdout and not r.stderr
        r = run("info", "--graph", RESNET.name)
        assert r.returncode == 0 and "lower bound" in r.stdout, r.stdout + r.stderr
        cache = tmp / f"hybrid-numba-{os.getuid()}"
        assert cache.is_dir() and stat.S_IMODE(cache.stat().st_mode) == 0o700
        assert not list(pkg.rglob("__pycache__")) and not list(home.iterdir())
    finally:
        for p in ro:
            os.chmod(p, stat.S_IMODE(os.lstat(p).st_mode) | 0o200)


def test_the_fallback_only_where_numba_would_find_no_writable_folder(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    # set first so that teardown restores the variable as it was: a delenv of an unset one records nothing, and the
    # folder set below then outlived the test, so every later subprocess compiled the kernels anew (77 s)
    monkeypatch.setenv("NUMBA_CACHE_DIR", "")
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    import numba.core.config as config

    monkeypatch.setattr(config, "CACHE_DIR", config.CACHE_DIR)
    monkeypatch.setattr(_numba_cache, "default_cache_usable", lambda root=None: True)
    assert _numba_cache.use_writable_cache() is None and "NUMBA_CACHE_DIR" not in os.environ

    monkeypatch.setattr(_numba_cache, "default_cache_usable", lambda root=None: False)
    folder = _numba_cache.use_writable_cache()
    assert folder == str(tmp_path / f"hybrid-numba-{os.getuid()}")
    assert os.environ["NUMBA_CACHE_DIR"] == folder and config.CACHE_DIR == folder   # numba was imported already
    assert _numba_cache.use_writable_cache() is None          # a NUMBA_CACHE_DIR already set is left alone

    monkeypatch.delenv("NUMBA_CACHE_DIR")
    os.chmod(folder, 0o777)                                    # writable by others: another user could plant code
    other = _numba_cache.use_writable_cache()
    assert other is not None and other != folder and Path(other).parent == tmp_path
    assert stat.S_IMODE(os.stat(other).st_mode) == 0o700


def test_numba_s_own_writability_test() -> None:
    d = Path(tempfile.mkdtemp())
    try:
        assert _numba_cache.writable(d / "a" / "b")
        (d / "file").write_text("x")
        assert not _numba_cache.writable(d / "file" / "sub")    # a file where the folder should be
    finally:
        shutil.rmtree(d)


def test_the_environment_is_as_the_session_found_it() -> None:
    """Runs after the fallback test (file order): its folder must not leak into later tests' subprocesses."""
    assert os.environ.get("NUMBA_CACHE_DIR") == _SESSION_CACHE_DIR

