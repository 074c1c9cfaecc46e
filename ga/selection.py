"""Survival (§5.1): softmax over normalized times, N_p survivors drawn from S candidates.

t_norm = (T_best - t) / T_best, where T_best is the best time seen so far;
candidate i survives with probability proportional to exp(t_norm_i / tau)
(eq. 1 with tau = 1; a smaller tau selects harder). Survivors are drawn
without replacement. The best candidate always survives (elitism), so the
population never loses the best plan found; infeasible candidates (inf)
survive only when there are not enough feasible ones.

The default tau is 0.05: with tau = 1, candidates 10% slower than the best
keep 90% of its weight, and the population mean barely moves (in a first
RNN-8-8K run it sat near 55% of the best's throughput for a whole minute);
with 0.05 a candidate 5% slower keeps e^-1 of it and the population gathers
near the best. Elitism keeps the best either way, and in 90-second runs the
best plan came out the same within noise for both (results/ga_ablation.md);
`--temperature 1` gives eq. 1 exactly.
"""
from __future__ import annotations

import numpy as np


def survival_probabilities(times: np.ndarray, t_best: float, temperature: float = 1.0) -> np.ndarray:
    """Eq. 1: softmax of t_norm / temperature; zero for infeasible (inf or NaN) candidates. A best time of 0
    (every op of the graph takes no time) normalizes by the slowest feasible time instead (all equal: uniform)."""
    times = np.asarray(times, dtype=np.float64)
    ok = np.isfinite(times)
    p = np.zeros(len(times))
    if not ok.any():
        return p
    scale = t_best if t_best > 0 else (float(times[ok].max()) or 1.0)
    logits = (t_best - times[ok]) / scale / temperature
    w = np.exp(logits - logits.max())
    p[ok] = w / w.sum()
    return p


def select_survivors(times: np.ndarray, n: int, t_best: float, rng: np.random.Generator,
                     temperature: float = 1.0, elite: int = 1) -> np.ndarray:
    """Indices of the n survivors (elites first, then softmax draws without replacement)."""
    times = np.asarray(times, dtype=np.float64)
    s = len(times)
    if n >= s:
        return np.arange(s)
    key = np.where(np.isnan(times), np.inf, times)
    order = np.argsort(key, kind="stable")
    n_elite = min(elite, n, int(np.isfinite(key).sum()))
    chosen = list(order[:n_elite])
    rest = order[n_elite:]
    p = survival_probabilities(times[rest], t_best, temperature)
    n_feasible = int((p > 0).sum())
    k = n - n_elite
    if n_feasible >= k:
        chosen.extend(rng.choice(rest, size=k, replace=False, p=p))
    else:
        chosen.extend(rest[p > 0])
        chosen.extend(rng.choice(rest[p == 0], size=k - n_feasible, replace=False))
    return np.array(chosen, dtype=np.int64)
