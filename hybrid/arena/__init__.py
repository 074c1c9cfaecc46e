"""Static arena planning (MegEngine's static memory planner): a byte offset for every buffer of a fixed
schedule in one arena, so a byte-budget plan becomes an `arena` plan.

Modules: `problem` (buffers with lifetimes, one arena), `lifetimes` (buffers from a plan's events, and the plan
with its offsets), `heuristics` (greedy by size, best-fit orders, MegEngine's simulation), `exact`
(MiniMalloc's search, compiled), `cpsat` (the alternative exact model), `repair` (best fit under a fixed
top, then evict-and-reinsert), `validate` (an independent check of an assignment), `layout` (a plan laid out
before it is written, with its fallbacks).
"""
