"""The one writer of every output file (plans, graphs, CSV, Parquet, logs, checkpoints, PNG): whole or not at all.

A job stopped while writing (SIGTERM from `timeout` or Slurm, Ctrl-C, SIGKILL, a full disk) leaves either the new
file or the earlier one, never a truncated one:

- the data goes to a temporary file in the target's folder with a unique name, `.NAME.hybrid-PID-XXXXXXXX.tmp`
  (two runs writing one path, such as a shared `--checkpoint`, never share a temporary), is flushed and fsync'ed,
  then renamed over the target (atomic within a file system); the folder is fsync'ed after;
- a symlink is written through: its target is replaced, the link stays;
- a read-only target, a folder, a name longer than the file system allows, a full disk, a missing permission:
  one-line errors (`HybridError`, so `error: ...` and exit 2) naming the path; the old file is left as it was;
- the temporary is removed on every exit path Python sees (an exception, Ctrl-C, a second signal's immediate
  exit through `hybrid.signals.exit_now`). SIGKILL cannot be caught: its temporary keeps the recognisable name
  above, and the next write of the same target removes those whose process (the PID in the name) is gone.

`write_whole(path, data)` writes str or bytes; `atomic_open(path, mode)` gives a file object to writers that
stream (csv, pandas, NumPy, matplotlib).
"""
from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from hybrid.errors import HybridError

MARK = ".hybrid-"          # in every temporary's name: .NAME.hybrid-PID-XXXXXXXX.tmp
_KEEP = 64                 # characters of NAME kept in a temporary's name (a long NAME must not make it too long)
_in_flight: set[str] = set()   # temporaries being written by this process
_written: list[str] = []       # files written whole since `forget_written` (a command's outputs, for its Ctrl-C line)


def _remove_in_flight() -> None:
    for tmp in list(_in_flight):
        try:
            os.unlink(tmp)
        except OSError:
            pass
    _in_flight.clear()


def _reason(e: OSError) -> str:
    return {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
            errno.ENAMETOOLONG: "the file name is too long for the file system",
            errno.EACCES: "permission denied", errno.EPERM: "permission denied",
            errno.EROFS: "the file system is read-only", errno.ENOENT: "its folder does not exist",
            errno.ENOTDIR: "a part of the path is not a folder", errno.EISDIR: "it is a folder",
            }.get(e.errno or 0, e.strerror or str(e))


def write_error(path: str | Path, e: OSError, folder: Path | None = None) -> HybridError:
    """The one-line error for a failed write. ENOENT for a new file in `folder` (its temporary) is read against
    the folder itself: a pseudo file system such as /proc answers ENOENT though the folder is there."""
    reason = _reason(e)
    if e.errno == errno.ENOENT and folder is not None:
        reason = (f"cannot create files in {folder} (the folder exists, but its file system refuses new files); "
                  "write to another folder") if folder.is_dir() else f"its folder {folder} does not exist"
    return HybridError(f"cannot write {path}: {reason}; nothing was written (an earlier file there is unchanged)")


def target_of(path: str | Path) -> Path:
    """The file that writing `path` replaces (a symlink's target); refuses folders and read-only files."""
    p = Path(path)
    try:
        if p.is_symlink():
            p = Path(os.path.realpath(p))  # write through the link: the link stays, its target gets the new data
        st = p.stat()
    except (FileNotFoundError, NotADirectoryError):  # nothing there yet (a missing folder fails when written)
        return p
    except OSError as e:  # ENAMETOOLONG among others
        raise write_error(path, e) from None
    if stat.S_ISDIR(st.st_mode):
        raise HybridError(f"cannot write {path}: it is a folder; give a file name")
    if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH) or not os.access(p, os.W_OK):
        raise HybridError(f"cannot write {path}: the file is read-only; make it writable (chmod u+w) or write "
                          "elsewhere")
    return p


def _sweep(target: Path) -> None:
    """Remove temporaries of `target` left by processes that are gone (SIGKILL during a write)."""
    pattern = re.compile(re.escape(f".{target.name[:_KEEP]}{MARK}") + r"(\d+)-[^/]*\.tmp$")
    try:
        names = os.listdir(target.parent)
    except OSError:
        return
    for name in names:
        m = pattern.match(name)
        if m is None or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue  # its writer still runs
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # another user's live process
        try:
            os.unlink(target.parent / name)
        except OSError:
            pass


def _mode_for(target: Path) -> int:
    """The new file's permissions: the old file's, else what a plain open() would give (0666 less the umask)."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", *, newline: str | None = None) -> Iterator[IO]:
    """A file object for `path` (mode "w" text in UTF-8, or "wb"): written to a temporary beside it, renamed over
    it when the block ends without an exception, removed otherwise. OSError while writing (a full disk) becomes a
    one-line HybridError naming `path`."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', not {mode!r}")
    from hybrid.signals import register_cleanup

    register_cleanup(_remove_in_flight)
    target = target_of(path)
    _sweep(target)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:_KEEP]}{MARK}{os.getpid()}-",
                                   suffix=".tmp")
    except OSError as e:
        raise write_error(path, e, target.parent) from None
    _in_flight.add(tmp)
    try:
        try:
            f = os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": newline}))
        except BaseException:
            os.close(fd)
            raise
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _mode_for(target))
        os.replace(tmp, target)
        _in_flight.discard(tmp)
        if str(path) not in _written:
            _written.append(str(path))
        _fsync_folder(target.parent)
    except OSError as e:
        raise write_error(path, e) from None
    finally:
        if tmp in _in_flight:
            _in_flight.discard(tmp)
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable (best effort: some file systems refuse to open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def written() -> list[str]:
    """The paths written whole since `forget_written()`, in order (`hybrid.cli.main` forgets at each command's
    start, so that an interrupted command can say what it left)."""
    return list(_written)


def forget_written() -> None:
    _written.clear()


def write_whole(path: str | Path, data: str | bytes) -> None:
    """Write `data` (text in UTF-8, or bytes) to `path` whole or not at all (see the module's docstring)."""
    with atomic_open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


FIGURE_FORMATS = ("png", "svg", "pdf", "jpg", "jpeg", "eps", "ps", "tif", "tiff", "webp", "svgz")


def figure_format(path: str | Path) -> str:
    """A figure's format from its file's suffix (PNG where it has none); HybridError for one matplotlib does not
    write, so that a typo fails before the work, not as a traceback after it."""
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    if fmt not in FIGURE_FORMATS:
        raise HybridError(f"{path}: a figure's format comes from its suffix, and .{fmt} is not one it can be "
                          f"written as; end the name in .png (or .{', .'.join(FIGURE_FORMATS[1:4])}, ...)")
    return fmt


def save_figure(fig: object, path: str | Path, dpi: int = 120) -> None:
    """A matplotlib figure written whole (its format from the file's suffix, PNG when it has none)."""
    fmt = figure_format(path)
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format=fmt, dpi=dpi)  # type: ignore[attr-defined]
