"""Which traced ops are a checkpointed region's recomputation, so their outputs are activations, not gradients.

The trace cannot tell by position: `torch.utils.checkpoint` runs the region again inside the backward, so its
ops come after the loss like the gradients' ops, and by data flow alone a backward formula's own products of
saved tensors (`self / other` in a division's backward) look the same. Checkpointing itself says when it
recomputes: the non-reentrant form under its `_recomputation_hook`, the reentrant form in
`CheckpointFunction.backward`'s call of the region's function. While either runs, every node the tracer adds
gets `meta[RECOMPUTES]`; hybrid.capture.to_graph reads it (an op's phase stays `backward`: that is when it
runs).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch.fx as fx

RECOMPUTES = "hybrid_recomputes"


def _tracer_graph() -> fx.Graph | None:
    """The graph make_fx is adding nodes to now (None outside a trace: nothing to mark)."""
    from torch.fx.experimental.proxy_tensor import get_proxy_mode

    mode = get_proxy_mode()
    return None if mode is None else mode.tracer.graph


@contextlib.contextmanager
def _marking() -> Iterator[None]:
    """Mark the nodes the tracer adds inside this block (nested blocks mark theirs once more, harmlessly)."""
    graph = _tracer_graph()
    if graph is None:
        yield
        return
    last = next(iter(reversed(graph.nodes)), None)
    try:
        yield
    finally:
        node = next(iter(graph.nodes), None) if last is None else last.next
        while node is not None and node.op != "root":   # the graph's node list is a ring through its root
            node.meta[RECOMPUTES] = True
            node = node.next


@contextlib.contextmanager
def marking_recomputation() -> Iterator[None]:
    """While the step is traced: checkpointing's recomputation marks the nodes it adds (`RECOMPUTES`)."""
    import torch.utils.checkpoint as ckpt

    hook = getattr(ckpt, "_recomputation_hook", None)
    function = getattr(ckpt, "CheckpointFunction", None)
    patched: list[tuple[Any, str, Any, bool]] = []

    def patch(owner: Any, name: str, value: Any) -> None:
        patched.append((owner, name, owner.__dict__.get(name), name in owner.__dict__))
        setattr(owner, name, value)

    if hook is not None:
        def enter(self: Any) -> Any:
            self._hybrid_marking = _marking()
            self._hybrid_marking.__enter__()
            return super(hook, self).__enter__()

        def exit_(self: Any, *exc: Any) -> Any:
            try:
                return super(hook, self).__exit__(*exc)
            finally:
                self._hybrid_marking.__exit__(None, None, None)

        patch(hook, "__enter__", enter)
        patch(hook, "__exit__", exit_)
    if function is not None:
        backward: Callable[..., Any] = function.backward

        def marked_backward(ctx: Any, *args: Any) -> Any:
            run = ctx.run_function

            def recompute(*a: Any, **k: Any) -> Any:
                with _marking():
                    return run(*a, **k)

            ctx.run_function = recompute
            try:
                return backward(ctx, *args)
            finally:
                ctx.run_function = run

        patch(function, "backward", staticmethod(marked_backward))
    try:
        yield
    finally:
        for owner, name, value, own in reversed(patched):
            if own:
                setattr(owner, name, value)
            else:
                delattr(owner, name)
