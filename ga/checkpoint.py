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
from hybrid.errors import HybridError
from hybrid.files import atomic_open

CHECKPOINT_FORMAT = "hybrid-ga-checkpoint/1"


def _identity(space: SearchSpace) -> dict[str, Any]:
    return {"graph": space.graph.name, "graph_sha256": space.graph.sha256, "device": space.device.to_json(),
            "planner_options": space.options.describe()}


def save_checkpoint(path: str | Path, space: SearchSpace, config: GAConfig, state: SearchState) -> None:
    path = Path(path)
    pop = state.population + [state.best]
    cnt_ptr = np.concatenate([[0], np.cumsum([len(i.cnt) for i in pop])]).astype(np.int64)
    header = {
        "format": CHECKPOINT_FORMAT, **_identity(space), "config": config.to_json(),
        "generation": state.generation, "evaluations": state.evaluations, "elapsed_s": state.elapsed_s,
        "rng": state.rng.bit_generator.state, "log": [asdict(r) for r in state.log.rows],
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


def load_checkpoint(path: str | Path, space: SearchSpace) -> tuple[GAConfig, SearchState]:
    """The saved config and state; refuses a checkpoint made for another graph, device or planner options."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            header = json.loads(str(z["header"]))
            schedules, cls, cnt_ptr, cnt, makespans, by_bytes, planner = (
                z[k] for k in ("schedules", "cls", "cnt_ptr", "cnt", "makespans", "by_bytes", "planner"))
    except (OSError, KeyError, ValueError) as e:
        raise HybridError(f"--resume {path}: not a readable GA checkpoint ({e})") from None
    if header.get("format") != CHECKPOINT_FORMAT:
        raise HybridError(f"--resume {path}: format {header.get('format')!r}, expected {CHECKPOINT_FORMAT!r}")
    mine = _identity(space)
    for key, what in (("graph_sha256", "graph file"), ("device", "device"), ("planner_options", "planner options")):
        if header.get(key) != mine[key]:
            raise HybridError(f"--resume {path}: the checkpoint was made for another {what} "
                              f"({header.get(key)!r} here {mine[key]!r}); resume with the same graph and flags")
    if schedules.shape[1] != space.n_ops or cls.shape[1] != space.n_sizes:
        raise HybridError(f"--resume {path}: its individuals do not fit graph {space.graph.name!r}")
    inds = [Individual(schedules[k].copy(), cls[k].copy(), cnt[cnt_ptr[k]:cnt_ptr[k + 1]].copy(),
                       by_bytes=bool(by_bytes[k]), planner=int(planner[k]), makespan=float(makespans[k]))
            for k in range(len(makespans))]
    rng = np.random.default_rng()
    rng.bit_generator.state = header["rng"]
    state = SearchState(population=inds[:-1], best=inds[-1], generation=int(header["generation"]),
                        evaluations=int(header["evaluations"]), elapsed_s=float(header["elapsed_s"]), rng=rng,
                        log=ConvergenceLog([GenerationStats(**r) for r in header["log"]]))
    return GAConfig(**header["config"]), state
