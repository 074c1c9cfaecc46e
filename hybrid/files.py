"""Result files are written whole or not at all: a temporary file beside the target, then a rename.

A job stopped while writing (SIGTERM from `timeout` or Slurm, Ctrl-C, a full disk) then leaves either the new
file or the earlier one, never a truncated plan, graph or trace.
"""
from __future__ import annotations

import os
from pathlib import Path


def write_whole(path: str | Path, data: str | bytes) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
