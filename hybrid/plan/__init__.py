"""The plan stage: the one plan type every planner returns (`types`), its metrics (`metrics`) and how fast any
plan with a given schedule can be (`bounds`)."""
from hybrid.plan.types import Allocation, ArenaAllocation, Event, Plan, SizeClass, SizeClassAllocation, UnconstrainedAllocation  # noqa: F401
