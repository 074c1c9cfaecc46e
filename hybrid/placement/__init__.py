"""CPU/GPU placement of inference graphs (the CPU/GPU partitioning paper): where each part of a graph runs.

- `partition`: cuts where one tensor alone crosses, key-operator cuts (after pooling and concatenation), and
  the part graph with branch stages (fork / branches / join): VGG16 gives its 5 conv blocks + classifier,
  AlexNet 4 parts, an Inception module one part per branch and a join;
- `costs`: re-costing a captured graph for a GPU preset and a CPU preset (`xeon-6248r`, `epyc-2c`), or from
  `hybrid profile` files;
- `timing`: the one `Placement` type, timed by the project's simulator (a `cpu` lane beside the GPU's three
  streams), its pipelined period, and the placement as a plan with a `cpu` stream;
- `schedulers`: all-CPU, all-GPU, the paper's greedy with its correction loop, HEFT, and exact (dynamic
  programming on chains, `chain`; CP-SAT on branched graphs, `cpsat`), for latency or throughput;
- `heft`: HEFT on task DAGs (Topcuoglu et al.'s example: makespan 80);
- `memory`: the GPU's usable memory as a constraint (GPU parts' parameters are resident all run): the exact
  need of a placement, the repair that moves parts to the CPU, and CP-SAT's linear relaxation.
The executor for placement plans is `executor.placed`; the command is `hybrid place`.
"""
