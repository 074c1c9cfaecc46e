"""The graph stage: the dataflow graph of one iteration (`types`), its array form (`arrays`), operator orders
(`order`), what an order keeps alive (`liveness`), what a graph needs (`info`: peak, ideal, the
persistent-tensor bound; bounds that count activations: `hybrid.bounds`), which ops may run again (`rerun`),
synthetic graphs (`synthetic`) and importers of other tools' files (`importers`)."""
from hybrid.graph.types import DEFAULT_IMPL, Graph, Impl, Op, TENSOR_KINDS, Tensor  # noqa: F401
