"""A writable folder for Numba's compiled-kernel cache, chosen before any kernel is defined.

The kernels are `@njit(cache=True)`, and Numba refuses to even define such a function (a RuntimeError at import,
so `hybrid --help` died) when it finds no writable cache folder. It looks, in order, in `NUMBA_CACHE_DIR`, in the
`__pycache__` beside each source file, then in the user-wide cache (`~/.cache/numba`, under `XDG_CACHE_HOME` if
set). A read-only install used with a read-only HOME has none of them, so there `use_writable_cache` points
`NUMBA_CACHE_DIR` at a private folder of the user's own under the temporary folder (kernels compile once and
are reused while that folder lasts; a fresh folder per process where it cannot be trusted), which child
processes (the search's workers) inherit. A `NUMBA_CACHE_DIR` the user set is left alone.
"""
from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

# The folders that hold `cache=True` kernels (Numba caches beside each source file).
_KERNEL_DIRS = ("hybrid", "hybrid/swap", "hybrid/arena", "ga")


def writable(folder: Path) -> bool:
    """Numba's own test: the folder can be made and a file created in it (root on a read-only mount: False)."""
    try:
        os.makedirs(folder, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError:
        return False
    return True


def user_wide_folder() -> Path:
    """Numba's user-wide cache folder (its appdirs' user_cache_dir for the app "numba")."""
    home = Path(os.path.expanduser("~"))
    if sys.platform == "darwin":
        return home / "Library" / "Caches" / "numba"
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA", home / "AppData" / "Local")) / "numba" / "Cache"
    return Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache") / "numba"


def default_cache_usable(root: Path | None = None) -> bool:
    """Whether Numba finds a writable cache for every kernel folder without help: each folder's `__pycache__`,
    or else the user-wide folder. `root` is the folder holding the `hybrid` and `ga` packages."""
    root = root if root is not None else Path(__file__).resolve().parent.parent
    in_tree = all(writable(root / d / "__pycache__") for d in _KERNEL_DIRS if (root / d).is_dir())
    return in_tree or writable(user_wide_folder())


def _own_private_folder(path: Path) -> bool:
    """The folder is a real folder (no symlink) owned by this user and writable by no one else: a cache there
    cannot have been planted by another user (Numba's cache holds pickled code)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    own = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    return stat.S_ISDIR(st.st_mode) and own and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def fallback_folder() -> Path | None:
    """A cache folder under the temporary folder: `hybrid-numba-UID`, reused across runs when it is this user's
    own and private, else a fresh one for this process; None when the temporary folder is not writable either."""
    tmp = Path(tempfile.gettempdir())
    uid = os.getuid() if hasattr(os, "getuid") else 0
    shared = tmp / f"hybrid-numba-{uid}"
    try:
        os.mkdir(shared, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    if _own_private_folder(shared) and writable(shared):
        return shared
    try:
        return Path(tempfile.mkdtemp(prefix="hybrid-numba-"))
    except OSError:
        return None


def use_writable_cache() -> str | None:
    """Set `NUMBA_CACHE_DIR` to a fallback folder where Numba would find no writable cache; return the folder set
    (None: nothing to do, or nowhere writable at all, in which case Numba's own error stands)."""
    if os.environ.get("NUMBA_CACHE_DIR") or default_cache_usable():
        return None
    folder = fallback_folder()
    if folder is None:
        return None
    os.environ["NUMBA_CACHE_DIR"] = str(folder)
    config = sys.modules.get("numba.core.config")
    if config is not None:       # numba already imported: its config read the environment then
        config.CACHE_DIR = str(folder)  # type: ignore[attr-defined]
    return str(folder)


def holds(*kernels: object) -> bool:
    """Whether numba's on-disk cache holds each of these `cache=True` kernels compiled for this source and this
    CPU, so that a first call loads it (a fraction of a second) instead of compiling; False where it cannot tell.
    An index of an older source reads as empty; an entry compiled for another CPU (a home directory shared across
    machines) does not count."""
    try:
        for k in kernels:
            here = k.targetctx.codegen().magic_tuple()  # type: ignore[attr-defined]
            if not any(key[1] == here for key in k._cache._cache_file._load_index()):  # type: ignore[attr-defined]
                return False
        return True
    except Exception:  # noqa: BLE001 - numba internals: any surprise means "cannot tell" (would compile)
        return False
