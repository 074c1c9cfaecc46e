"""Genetic search over schedules and size-class allocations (SwapAdvisor §5)."""
