"""The plan stage: the one plan type every planner returns (`types`), its event kinds (`events`) and its
metrics (`metrics`). How fast any plan can be: `hybrid.bounds`."""
from hybrid.plan.types import Allocation, ArenaAllocation, Event, Plan, SizeClass, SizeClassAllocation, UnconstrainedAllocation  # noqa: F401
