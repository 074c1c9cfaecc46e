"""Swap planning: size-class and byte pools (`pools`), which tensor to evict (`eviction`), the compiled walk
that emits swaps (`kernel`) and its driver (`planner`), the time-ordered re-walk that binds each allocation to
released memory (`rewalk`, choosing with `free_memory`), which victims to drop and recompute instead
(`recompute`), the baselines, plans to run without a search (`quick_plans`), and the bridges between the
planner's augmented graph and the plan type (`augmented`, `to_plan`, `from_plan`, `critical_path`)."""
