"""Workers lost mid-search (a process killed by the OOM killer, a Dask cluster's workers or scheduler gone) end the
search with its best plan so far, as a stop does: it was a traceback and no plan (`hybrid optimize --scheduler`,
both workers killed at generation 63: FuturesCancelledError, exit 1, nothing written). Bad cluster settings are
one line each."""
from __future__ import annotations

import os
import signal

import pytest

from ga import GAConfig, optimize
from ga.evaluation import ProcessPoolEvaluator
from hybrid.errors import HybridError
from hybrid.pipeline import OptimizeOptions
from hybrid.swap.augmented import PlannerOptions
from hybrid.validator import check
from tests.cli.helpers import error_line
from tests.ga.graphs import small_training


def test_a_pool_whose_workers_die_ends_the_search_with_its_best_plan() -> None:
    g, dev = small_training()
    ev = ProcessPoolEvaluator(g, dev, PlannerOptions(), workers=1)
    ev.chunks_per_worker = 1 << 16

    def kill_workers(stats) -> None:  # noqa: ANN001 - ga.progress.GenerationStats
        if stats.generation == 2:
            for pid in list(ev._pool._processes):
                os.kill(pid, signal.SIGKILL)

    try:
        r = optimize(g, dev, GAConfig(population=8, children=8, seed=3), generations=50, evaluator=ev,
                     on_generation=kill_workers)
    finally:
        ev.close()
    assert r.stop_reason.startswith("evaluation lost (an evaluation process died"), r.stop_reason
    assert 2 <= r.generations < 50
    check(g, r.to_plan())


def test_a_search_whose_workers_die_before_its_first_plan_says_so() -> None:
    g, dev = small_training()
    ev = ProcessPoolEvaluator(g, dev, PlannerOptions(), workers=1)
    for pid in list(ev._pool._processes) or []:
        os.kill(pid, signal.SIGKILL)
    ev._submit([])                        # starts the pool's worker if it had none yet
    for pid in list(ev._pool._processes):
        os.kill(pid, signal.SIGKILL)
    try:
        with pytest.raises(HybridError, match="the search has no plan: an evaluation process died"):
            optimize(g, dev, GAConfig(population=8, children=8, seed=3), generations=5, evaluator=ev)
    finally:
        ev.close()


@pytest.mark.parametrize("address, said", [("foo", "not a Dask scheduler address"),
                                           ("http://127.0.0.1:8786", "not a Dask scheduler address")])
def test_a_scheduler_that_is_not_an_address_is_one_line(address: str, said: str) -> None:
    pytest.importorskip("distributed")
    from ga.evaluation import DaskEvaluator

    g, dev = small_training()
    with pytest.raises(HybridError, match=said):
        DaskEvaluator(g, dev, PlannerOptions(), scheduler=address)


def test_an_unreachable_scheduler_is_waited_for_within_the_time_limit() -> None:
    """Dask's connect timeout was a fixed 20 s, whatever --time-limit: a 4 s limit waited 20 s for a scheduler
    that was not there. The wait is now what the limit leaves (at most 20 s), and the error says how long."""
    pytest.importorskip("distributed")
    import re
    import socket

    from hybrid.pipeline import run_optimize

    with socket.socket() as s:    # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    g, dev = small_training()
    with pytest.raises(HybridError, match="cannot reach the Dask scheduler within") as e:
        run_optimize(g, dev, 4.0, OptimizeOptions(config=GAConfig(population=4, children=4), refine="none",
                                                 scheduler=f"tcp://127.0.0.1:{port}"))
    assert float(re.search(r"within ([0-9.]+) s", str(e.value)).group(1)) <= 4.0, str(e.value)


def test_an_empty_scheduler_is_refused() -> None:
    with pytest.raises(HybridError, match="--scheduler .* is empty"):
        OptimizeOptions(scheduler=" ").check()


def test_outputs_on_the_resume_file_are_refused_and_checkpoints_every_zero_too(tmp_path) -> None:
    """`--out` (or `--log`) on the `--resume` file overwrote the checkpoint; `--checkpoint` on it is how a search
    goes on."""
    from hybrid.graph.synthetic import training_graph

    gp, ck = tmp_path / "g.json", tmp_path / "ga.ckpt"
    training_graph(4, seed=1).save(gp)
    ck.write_text("x")
    line = error_line("optimize", "--graph", gp, "--time-limit", "10s", "--resume", ck, "--out", ck)
    assert "--out" in line and "--resume file" in line, line
    line = error_line("optimize", "--graph", gp, "--time-limit", "10s", "--resume", ck, "--log", ck,
                      "--out", tmp_path / "p.json")
    assert "--log" in line and "--resume file" in line, line
    assert ck.read_text() == "x"
    from tests.cli.helpers import run

    r = run("optimize", "--graph", gp, "--time-limit", "10s", "--checkpoint-every", "0", "--out", tmp_path / "p.json")
    assert r.exit_code == 2 and "--checkpoint-every" in r.output, r.output
