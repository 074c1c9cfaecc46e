"""CPU/GPU placement of inference graphs (seed 004; issue 20, not built yet): cut the graph at key operators,
time each part on each device, and place the parts (critical-path greedy with correction, HEFT, exact)."""
