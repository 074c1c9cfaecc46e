"""CPU/GPU placement of inference graphs (seed 004; issue 20, in progress).

Built so far: `partition` (cuts where one tensor alone crosses; key-operator cuts after pooling and
concatenation: VGG16 splits into its 5 conv blocks + classifier, AlexNet into 4 parts, as in the paper),
`chain` (one input's latency for a chain of parts; all-CPU, all-GPU, the paper's greedy with its correction
loop, exact dynamic programming) and `heft` (HEFT for task DAGs, checked on Topcuoglu et al.'s example).
Not yet: CPU/GPU cost presets (xeon-6248r, p2200), branch stages and CP-SAT for branched graphs, the
throughput objective, placements as plans (the `cpu` stream), the executor and `hybrid place`.
"""
