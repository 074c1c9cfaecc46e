"""What a search returns: the best individual, how the search went, and the plan it makes."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ga.algorithm import GAConfig
from ga.encoding import POLICIES, Individual, PlannerGene, SearchSpace
from ga.progress import ConvergenceLog
from hybrid.plan import Plan
from hybrid.swap.to_plan import to_plan
from hybrid.swap.augmented import AugmentedGraph
from hybrid.swap.planner import SwapPlanner

if TYPE_CHECKING:
    import pandas as pd

    from ga.algorithm import SearchState


@dataclass(repr=False)
class SearchResult:
    """A finished (or stopped) search: its best individual, counts and stop reason, the convergence log, and
    the state to resume from. `to_plan()` turns the best individual into a plan."""

    space: SearchSpace
    config: GAConfig
    best: Individual
    generations: int
    evaluations: int
    search_time_s: float         # including time before a resume
    stop_reason: str             # "generations", "time limit", "interrupted", "stopped", "lower bound"
    log: ConvergenceLog
    evaluator: str = "serial"
    workers: int = 1
    cache_hits: int = 0          # children whose fitness came from the cache (not counted in evaluations)
    state: "SearchState | None" = None   # where the search stopped: `ga.optimize(start=...)` goes on from it

    def __repr__(self) -> str:
        """One line, for notebooks: the dataclass default printed the population's arrays and the log."""
        from hybrid.units import format_seconds

        return (f"SearchResult(best makespan {format_seconds(self.makespan_s)}, {self.generations} generations, "
                f"{self.evaluations} evaluations, stop {self.stop_reason!r}, {self.search_time_s:.1f} s, "
                f"{self.evaluator} evaluator)")

    @property
    def makespan_s(self) -> float:
        return self.best.makespan

    def log_frame(self) -> "pd.DataFrame":
        return self.log.to_frame()

    def augmented(self) -> AugmentedGraph:
        sp = self.space
        return SwapPlanner(sp.graph, sp.device).plan(self.best.schedule, sp.pool(self.best), sp.options_for(self.best))

    def planner_info(self) -> dict[str, Any]:
        c = self.config
        return {"name": "ga", "seed": c.seed, "search": c.search, "population": c.population,
                "children": c.children, "mutation_rate": c.mutation_rate, "generations": self.generations,
                "evaluations": self.evaluations, "cache_hits": self.cache_hits,   # no wall time: same seed, same bytes
                "stop_reason": self.stop_reason, "evaluator": self.evaluator, "workers": self.workers,
                "policy": POLICIES[PlannerGene.unpack(self.best.planner).policy],
                "planner_gene": PlannerGene.unpack(self.best.planner).describe(),
                "planner_options": self.space.options_for(self.best).describe(),
                **({"class_mapping": c.class_mapping} if c.class_mapping != "monotone" else {}),
                **({"start": c.start} if c.start != "program" else {})}

    def to_plan(self, **planner_extra: Any) -> Plan:
        """The best individual as a plan (its makespan equals the search's fitness for it)."""
        return to_plan(self.augmented(), {**self.planner_info(), **planner_extra})
