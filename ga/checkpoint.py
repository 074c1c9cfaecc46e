"""Save and resume a search: the population, the best so far, the random generator, the log.

One `.npz` file (NumPy arrays plus a JSON header), written atomically
(`hybrid.files`: a uniquely named temporary file, then rename) so an interrupted write never leaves a broken
checkpoint. The header names the graph (sha256), device and planner options;
resuming against anything else is refused, since the stored makespans would
no longer mean the same.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ga.algorithm import GAConfig, SearchState
from ga.encoding import Individual, SearchSpace
from ga.progress import ConvergenceLog, GenerationStats
from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.files import atomic_open

CHECKPOINT_FORMAT = "hybrid-ga-checkpoint/1"


def _identity(space: SearchSpace) -> dict[str, Any]:
    return {"graph": space.graph.name, "graph_sha256": space.graph.sha256, "device": space.device.to_json(),
            "planner_options": space.options.describe()}


def save_checkpoint(path: str | Path, space: SearchSpace, config: GAConfig, state: SearchState,
                    full_device: Device | None = None) -> None:
    """`full_device`: the device the plans are for (a headroom search plans on less memory than it has)."""
    path = Path(path)
    pop = state.population + [state.best]
    cnt_ptr = np.concatenate([[0], np.cumsum([len(i.cnt) for i in pop])]).astype(np.int64)
    header = {
        "format": CHECKPOINT_FORMAT, **_identity(space), "config": config.to_json(),
        "generation": state.generation, "evaluations": state.evaluations, "elapsed_s": state.elapsed_s,
        "rng": state.rng.bit_generator.state, "log": [asdict(r) for r in state.log.rows],
        **({"full_device": full_device.to_json()} if full_device is not None else {}),
    }
    arrays = {
        "header": np.array(json.dumps(header)),
        "schedules": np.stack([i.schedule for i in pop]).astype(np.int32),
        "cls": np.stack([i.cls for i in pop]).astype(np.int64),
        "cnt_ptr": cnt_ptr,
        "cnt": np.concatenate([i.cnt for i in pop]).astype(np.int64),
        "makespans": np.array([i.makespan for i in pop], dtype=np.float64),
        "by_bytes": np.array([i.by_bytes for i in pop], dtype=np.bool_),
        "planner": np.array([i.planner for i in pop], dtype=np.int16),
    }
    with atomic_open(path, "wb") as f:  # a unique temporary: two runs sharing --checkpoint never collide
        np.savez_compressed(f, **arrays)


_ARRAYS = {   # name: (dtype kinds, dimensions) as save_checkpoint writes them
    "schedules": ("iu", 2), "cls": ("iu", 2), "cnt_ptr": ("iu", 1), "cnt": ("iu", 1), "makespans": ("f", 1),
    "by_bytes": ("b", 1), "planner": ("iu", 1),
}
_HEADER = ("format", "graph_sha256", "device", "planner_options", "config", "generation", "evaluations",
           "elapsed_s", "rng", "log")
_ABSENT = object()


def _not_ours(path: Path, why: str) -> HybridError:
    """The one error for a file that save_checkpoint did not write (or that was damaged since), saying why."""
    return HybridError(f"--resume {path} is not a GA checkpoint written by `hybrid optimize --checkpoint` ({why}); "
                       "give the file that flag wrote")


def _read(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The header and arrays; any file that is not a checkpoint gets a reason of ours, never numpy's (its text
    about allow_pickle would suggest loading an untrusted file unsafely)."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise HybridError(f"--resume {path}: cannot read it ({e.strerror})") from None
    if magic not in (b"PK\x03\x04", b"PK\x05\x06"):
        raise _not_ours(path, "not a zip/npz file")
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = next((k for k in ("header", *_ARRAYS) if k not in z.files), None)
            if missing is not None:
                raise _not_ours(path, f"no {missing!r} array")
            raw = z["header"]
            arrays = {k: z[k] for k in _ARRAYS}
    except HybridError:
        raise
    except ValueError as e:
        why = "it holds pickled Python objects" if "pickle" in str(e) else "an array in it cannot be read"
        raise _not_ours(path, why) from None
    except Exception:   # BadZipFile, zlib.error, EOFError, OSError: numpy and zipfile raise many kinds
        raise _not_ours(path, "a damaged or truncated zip/npz file") from None
    try:
        header = json.loads(str(raw)) if raw.ndim == 0 else None
    except (ValueError, RecursionError):
        header = None
    if not isinstance(header, dict):
        raise _not_ours(path, "its header is not a JSON object")
    fmt = header.get("format")
    if fmt != CHECKPOINT_FORMAT:
        if isinstance(fmt, str) and fmt.startswith(CHECKPOINT_FORMAT.split("/")[0] + "/"):
            raise HybridError(f"--resume {path}: checkpoint format {fmt!r}; this version reads {CHECKPOINT_FORMAT!r}, "
                              "so resume it with the version that wrote it")
        raise _not_ours(path, f"format {fmt!r}, expected {CHECKPOINT_FORMAT!r}")
    missing = next((k for k in _HEADER if k not in header), None)
    if missing is not None:
        raise _not_ours(path, f"its header has no {missing!r} field")
    for k, (kinds, ndim) in _ARRAYS.items():
        if arrays[k].dtype.kind not in kinds or arrays[k].ndim != ndim:
            raise _not_ours(path, f"array {k!r} is {arrays[k].dtype} with {arrays[k].ndim} dimensions")
    n = len(arrays["makespans"])
    ptr = arrays["cnt_ptr"]
    same_n = all(len(arrays[k]) == n for k in ("schedules", "cls", "by_bytes", "planner"))
    if not (n >= 1 and same_n and len(ptr) == n + 1 and ptr[0] == 0 and bool(np.all(np.diff(ptr) >= 0))
            and ptr[-1] == len(arrays["cnt"])):
        raise _not_ours(path, "its arrays disagree on the number of individuals")
    return header, arrays


def _short(v: Any) -> str:
    r = "absent" if v is _ABSENT else repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def _differing(theirs: dict, mine: dict) -> list[str]:
    """The fields of two records that differ (one absent from either counts)."""
    return [k for k in dict.fromkeys([*theirs, *mine]) if theirs.get(k, _ABSENT) != mine.get(k, _ABSENT)]


def _differences(theirs: Any, mine: Any) -> str:
    """'memory_bytes 4194304 in the checkpoint, 8388608 here': the fields that differ, not two whole dicts."""
    if isinstance(theirs, dict) and isinstance(mine, dict):
        keys = _differing(theirs, mine)
        return "; ".join(f"{k} {_short(theirs.get(k, _ABSENT))} in the checkpoint, {_short(mine.get(k, _ABSENT))} here"
                         for k in keys)
    return f"{_short(theirs)} in the checkpoint, {_short(mine)} here"


def checkpoint_generation(path: str | Path) -> int:
    """The generation a checkpoint was written at (`ga.optimize` counts generations across a resume), read with
    the same checks as a resume."""
    header, _ = _read(Path(path))
    return int(header["generation"])


def searched_memory(path: str | Path, device: Device) -> int | None:
    """The memory_bytes the checkpoint's search planned on for `device`: less than its own where the search was a
    headroom search's (`hybrid.arena.headroom`), which a resume keeps rather than calibrating afresh
    (`hybrid.pipeline.optimize`). None where the checkpoint does not record the device its plans are for
    (`ga.optimize` alone, or an older version's); one recorded for another device is refused, naming the fields."""
    path = Path(path)
    header, _ = _read(path)
    theirs, full, mine = header["device"], header.get("full_device"), device.to_json()
    if not isinstance(theirs, dict) or not isinstance(full, (dict, type(None))):
        raise _not_ours(path, "its header's device is not what that command writes")
    if full is None:
        return None
    if full != mine:
        raise HybridError(f"--resume {path}: the checkpoint was made for another device "
                          f"({_differences(full, mine)}); resume with the same graph and flags")
    m = theirs.get("memory_bytes")
    if isinstance(m, bool) or not isinstance(m, int) or not device.reserve_bytes < m <= device.memory_bytes:
        raise _not_ours(path, f"its header's device has memory_bytes {_short(m)}, not what that command writes")
    return m


def checkpoint_config(path: str | Path) -> GAConfig:
    """The search settings a resume keeps (`hybrid optimize --resume` refuses flags that differ from them)."""
    header, _ = _read(Path(path))
    try:
        return GAConfig(**header["config"])
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError, HybridError):
        raise _not_ours(Path(path), "its header's config is not what that command writes") from None


def load_checkpoint(path: str | Path, space: SearchSpace) -> tuple[GAConfig, SearchState]:
    """The saved config and state; refuses a checkpoint made for another graph, device or planner options."""
    path = Path(path)
    header, arrays = _read(path)
    mine = _identity(space)
    if header["graph_sha256"] != mine["graph_sha256"]:
        raise HybridError(f"--resume {path}: the checkpoint was made for another graph file (graph "
                          f"{_short(header.get('graph'))}, sha256 {str(header['graph_sha256'])[:12]}... in the "
                          f"checkpoint; {mine['graph']!r}, sha256 {mine['graph_sha256'][:12]}... here); resume with "
                          "the same graph and flags (--workspaces-aside plans a copy of the graph without workspaces: give it "
                          "both times or neither)")
    for key, what in (("device", "device"), ("planner_options", "planner options")):
        if header[key] != mine[key]:
            theirs = header[key]
            older = (key == "device" and "full_device" not in header and isinstance(theirs, dict)
                     and _differing(theirs, mine[key]) == ["memory_bytes"])
            advice = ("resume with the same graph and flags, and a --time-limit that leaves room for the headroom's "
                      "calibration (this checkpoint does not record the device its plans are for, an older "
                      "version's: a headroom is calibrated afresh, and left out where the time left is short)"
                      if older else "resume with the same graph and flags")
            raise HybridError(f"--resume {path}: the checkpoint was made for another {what} "
                              f"({_differences(theirs, mine[key])}); {advice}")
    schedules, cls, cnt_ptr, cnt, makespans, by_bytes, planner = (arrays[k] for k in _ARRAYS)
    if schedules.shape[1] != space.n_ops or cls.shape[1] != space.n_sizes:
        raise HybridError(f"--resume {path}: its individuals do not fit graph {space.graph.name!r}")
    inds = [Individual(schedules[k].copy(), cls[k].copy(), cnt[cnt_ptr[k]:cnt_ptr[k + 1]].copy(),
                       by_bytes=bool(by_bytes[k]), planner=int(planner[k]), makespan=float(makespans[k]))
            for k in range(len(makespans))]
    field = "rng"
    try:   # a header edited or damaged past the checks above: name the field rather than raise from deep inside
        rng = np.random.default_rng()
        rng.bit_generator.state = header["rng"]
        field = "log"
        log = ConvergenceLog([GenerationStats(**r) for r in header["log"]])
        field = "generation, evaluations or elapsed_s"
        state = SearchState(population=inds[:-1], best=inds[-1], generation=int(header["generation"]),
                            evaluations=int(header["evaluations"]), elapsed_s=float(header["elapsed_s"]), rng=rng,
                            log=log)
        field = "config"
        config = GAConfig(**header["config"])
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError):
        raise _not_ours(path, f"its header's {field} is not what that command writes") from None
    return config, state
