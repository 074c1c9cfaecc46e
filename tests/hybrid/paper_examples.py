"""The SwapAdvisor paper's worked examples as graphs (Figure 1 and Figure 3)."""
from __future__ import annotations

from hybrid.device import Device
from hybrid.graph import Graph, Op, Tensor

MB = 1_000_000
# One time unit per op and per MB copied: 1 MB/s links, 1 s per op.
UNIT_DEVICE = Device("unit", 10 * MB, 1.0 * MB, 1.0 * MB, 0.0, alignment_bytes=1)   # the paper's units


def figure1(order: str = "right") -> Graph:
    """Data→A0; Conv1(A0,W1)→A1; Conv2(A0,W2)→A2; Conv3(A2,W3)→A3; Conv4(A3,W4)→A4; Concat(A1,A4)→A5.

    All tensors 1 MB except A2 and A5 (2 MB). The omitted backward pass is
    stood in for by one op per activation reading it, so evicting an
    activation copies it out. `order` puts the left branch (Conv1) first or
    the right branch (Conv2..4) first in the op list (the program order).
    """
    size = {"A2": 2 * MB, "A5": 2 * MB}
    tensors = [Tensor(f"W{i}", MB, "param", True) for i in range(1, 5)]
    tensors += [Tensor(f"A{i}", size.get(f"A{i}", MB), "activation") for i in range(6)]
    tensors += [Tensor(f"G{i}", 0, "gradient") for i in range(6)]
    left = [Op("Conv1", "conv", ("A0", "W1"), ("A1",), 1.0)]
    right = [Op("Conv2", "conv", ("A0", "W2"), ("A2",), 1.0), Op("Conv3", "conv", ("A2", "W3"), ("A3",), 1.0),
             Op("Conv4", "conv", ("A3", "W4"), ("A4",), 1.0)]
    ops = [Op("Data", "data", (), ("A0",), 1.0)]
    ops += (right + left) if order == "right" else (left + right)
    ops += [Op("Concat", "concat", ("A1", "A4"), ("A5",), 1.0)]
    ops += [Op(f"Back{i}", "backward", (f"A{i}",), (f"G{i}",), 1.0) for i in (5, 4, 3, 2, 1, 0)]
    return Graph(f"figure1-{order}", tensors, ops, UNIT_DEVICE)


def figure3() -> Graph:
    """op1(W1)→A1; op2(A1,W2)→A2; op3(A2,W3)→A3; unit sizes, 4 units of memory; A1 needed later."""
    tensors = [Tensor(f"W{i}", 1, "param", True) for i in (1, 2, 3)]
    tensors += [Tensor(f"A{i}", 1, "activation") for i in (1, 2, 3)]
    tensors += [Tensor("G1", 0, "gradient")]
    ops = [Op("op1", "op", ("W1",), ("A1",), 1.0), Op("op2", "op", ("A1", "W2"), ("A2",), 1.0),
           Op("op3", "op", ("A2", "W3"), ("A3",), 1.0), Op("back1", "backward", ("A1", "A3"), ("G1",), 1.0)]
    return Graph("figure3", tensors, ops, Device("unit4", 4, 1.0, 1.0, 0.0, alignment_bytes=1))
