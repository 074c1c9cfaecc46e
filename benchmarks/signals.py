"""Signals are never lost: SIGTERM (or Ctrl-C) at timed moments over the first seconds of `hybrid optimize`.

Each try starts `hybrid optimize` in its own session, sends the signal to the whole process group after a delay
(spread evenly over `--spread`), and records the exit status, how long the command took to exit after the
signal, whether a plan was written (and validates) and whether any process of the session was left behind. A
signal counts as lost when the command ran on (exit 0 without saying "interrupted", or no exit) or exited later
than `--lost-after` seconds after it (issue 30: the first signal writes the best plan within 5 s, or exits 130/143 at once when there is no
plan yet). With `--second`, a second signal follows the first after 1 s and the command must exit at once.

    python benchmarks/signals.py --tries 20 --spread 5          # the issue's acceptance: 0 lost
    python benchmarks/signals.py --tries 4 --spread 5 --sig INT

Timings depend on the machine's load; the script prints one line per try and a summary (counts, exit times).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRAPH = ROOT / "examples" / "resnet18-b32.json"


@dataclass
class Try:
    delay_s: float
    status: int | None
    exit_after_s: float          # from the (first) signal to the command's exit
    said_interrupted: bool
    wrote_plan: bool
    plan_valid: bool | None
    left_behind: int             # processes of the session still alive after the exit
    lost: bool
    detail: str = ""             # where the try went wrong: the command's stderr tail (an exit not 0/130/143,
    #                              or a lost signal), the validator's output (a plan that does not validate)


def session_processes(sid: int) -> list[int]:
    """Live (non-zombie) processes of session `sid` (Linux /proc)."""
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            alive.append(int(stat.parent.name))
    return alive


SECOND_AFTER_S = 1.0


def one_try(delay_s: float, sig: int, work: Path, time_limit: str, lost_after_s: float, second: bool,
            extra: list[str]) -> Try:
    out = work / "plan.json"
    out.unlink(missing_ok=True)
    err_path = work / "stderr.txt"
    cmd = [sys.executable, "-m", "hybrid.cli.main", "optimize", "--graph", str(GRAPH),
           "--memory", "64MiB", "--time-limit", time_limit, "--out", str(out), "--quiet", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(err_path, "w") as err:
        # SIGINT's default disposition in the child, whatever this script's shell left ignored (`cmd &`)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT, env=env,
                                start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        time.sleep(delay_s)
        t0 = time.monotonic()
        try:
            os.killpg(proc.pid, sig)
            if second:   # a second stop, past hybrid.signals.REPEAT_S (a repeat within it is the same stop)
                time.sleep(SECOND_AFTER_S)
                os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            status = proc.wait(timeout=max(60.0, 3 * lost_after_s))
        except subprocess.TimeoutExpired:
            status = None
        took = time.monotonic() - t0 - (SECOND_AFTER_S if second else 0.0)
    time.sleep(0.5)  # the resource tracker exits right after the main process
    left = session_processes(proc.pid)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if status is None:
        proc.kill()
        proc.wait()
    stderr = err_path.read_text()
    said = "interrupted" in stderr
    valid = None
    if out.exists():
        check = subprocess.run([sys.executable, "-m", "hybrid.cli.main", "validate", "--graph", str(GRAPH),
                                "--plan", str(out)], capture_output=True, text=True, cwd=ROOT, env=env)
        valid = check.returncode == 0
    # a signal that stops the process counts as honoured (a status below 0: killed by it while the interpreter was
    # still starting, before any of the project's code ran); lost: ignored (exit 0 without saying so) or too late
    lost = status is None or took > lost_after_s or (status == 0 and not said)
    detail = ""
    if valid is False:
        detail = f"validate: {(check.stdout + check.stderr).strip()[-1500:]}"
    elif lost or status not in (0, 130, 143) and not (status is not None and status < 0):
        detail = f"stderr: {stderr.strip()[-1500:]}"
    return Try(delay_s, status, took, said, out.exists(), valid, len(left), lost, detail)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tries", type=int, default=20)
    ap.add_argument("--spread", type=float, default=5.0, help="signals at delays spread evenly over [0, SPREAD] s")
    ap.add_argument("--sig", choices=["TERM", "INT"], default="TERM")
    ap.add_argument("--time-limit", default="20s", help="optimize's --time-limit (longer than --spread)")
    ap.add_argument("--lost-after", type=float, default=5.0, help="a later exit counts as a lost signal")
    ap.add_argument("--second", action="store_true", help="send a second signal 1 s after the first")
    ap.add_argument("--json", type=Path, default=None, help="also write the tries here")
    ap.add_argument("extra", nargs="*", help="more optimize flags (after --)")
    a = ap.parse_args()
    sig = signal.SIGTERM if a.sig == "TERM" else signal.SIGINT
    delays = [a.spread * (k + 0.5) / a.tries for k in range(a.tries)]
    tries: list[Try] = []
    with tempfile.TemporaryDirectory() as tmp:
        for d in delays:
            t = one_try(d, sig, Path(tmp), a.time_limit, a.lost_after, a.second, a.extra)
            tries.append(t)
            print(f"delay {t.delay_s:5.2f} s: exit {t.status} after {t.exit_after_s:5.2f} s, "
                  f"plan {'written' if t.wrote_plan else 'none'}"
                  f"{'' if t.plan_valid is None else ' (valid)' if t.plan_valid else ' (INVALID)'}, "
                  f"left behind {t.left_behind}{'  LOST' if t.lost else ''}", flush=True)
            if t.detail:
                print(f"    {t.detail}", flush=True)
    exits = sorted(t.exit_after_s for t in tries)
    print(f"{len(tries)} tries (SIG{a.sig}{', twice' if a.second else ''}): {sum(t.lost for t in tries)} lost, "
          f"{sum(t.wrote_plan for t in tries)} wrote a plan ({sum(bool(t.plan_valid) for t in tries)} valid), "
          f"{sum(t.status in (130, 143) for t in tries)} exited {128 + sig} with none, "
          f"{sum(t.status is not None and t.status < 0 for t in tries)} killed by it before Python started, "
          f"{sum(t.left_behind > 0 for t in tries)} left processes; exit after the signal: median "
          f"{exits[len(exits) // 2]:.2f} s, max {exits[-1]:.2f} s")
    if a.json is not None:
        a.json.write_text(json.dumps([asdict(t) for t in tries], indent=1))


if __name__ == "__main__":
    main()
