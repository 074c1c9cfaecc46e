"""SwapAdvisor's RNN-L-XK and BRNN-L-XK: stacked LSTM language models unrolled over time.

Source: SwapAdvisor (Huang, Jin, Li, ASPLOS'20) §6.1 "Evaluated DNN models" and
Table 1. The paper names RNN-L-XK (BRNN-L-XK) an L-layer (bidirectional) LSTM
RNN whose cell input is one sequence element (e.g. a character); in a BRNN
layer one sub-layer reads the sequence forwards, one reversed, each with its
own parameters, and their activations are concatenated. Parameters are shared
by every time step of a layer (§6.2), which is what makes the schedule matter.

What the paper leaves open, and the choices made here:

- Hidden size: X*1024 units per layer (the translated text says "one layer's
  parameter size is XK"; we read the K as 1024 hidden units, which gives the
  Table 1 memory figures below).
- Sequence length: not stated; 40 steps is our estimate from Table 1's op
  counts. MXNet's LSTMCell has 13 forward ops per cell-step and about as many
  backward, so 8 layers x 40 steps make ~8300 training ops (Table 1: 8594)
  and 4 layers x 2 directions x 40 steps ~8600 (Table 1: 9034). Memory does
  not settle it: captured with `hybrid capture` (SGD with momentum) and run in
  program order with tensors freed after their last use, RNN-8-8K peaks at
  ~59 GB at 40 steps (~79 GB at 80) against Table 1's 118 GB, and BRNN-4-8K
  at ~68 GB against 99 GB, while the CNNs of Table 1 come within 0.7-0.9 of
  their figures the same way; MXNet holding each step's partial weight
  gradients until they are summed could explain the gap. `seq_len=` changes
  it.
- Vocabulary: not stated; 10,000 (the Penn Treebank size of MXNet's
  `lstm_bucketing` example, which SwapAdvisor's MXNet 1.2 base ships).
- Embedding width: equal to the hidden size.
- Loss: next-token language modelling, softmax cross-entropy at every step
  through one output projection shared by all steps (as the MXNet example
  does), averaged over batch x steps.
- Batch: 256 for RNN, 128 for BRNN (Table 1's caption).

The cell is written with two `nn.Linear`s and element-wise ops in MXNet's
gate order (input, forget, candidate, output), so every unrolled step is the
same small op set on the same shared weights, with no fused RNN kernel.
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn as nn

from hybrid.zoo import losses
from hybrid.zoo.inputs import TokenBatch
from hybrid.zoo.registry import Family, ModelSpec

PAPER = "SwapAdvisor (ASPLOS'20) §6.1, Table 1"
SEQ_LEN = 40
VOCAB = 10_000


class LSTMCell(nn.Module):
    """One LSTM step: gates = i2h(x) + h2h(h); c' = f*c + i*g; h' = o*tanh(c')."""

    def __init__(self, input_size: int, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.i2h = nn.Linear(input_size, 4 * hidden)
        self.h2h = nn.Linear(hidden, 4 * hidden)
        bound = hidden ** -0.5  # nn.LSTM's initialisation
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gates = self.i2h(x) + self.h2h(h)
        i, f, g, o = gates.chunk(4, dim=1)
        i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
        c = f * c + i * g
        h = o * torch.tanh(c)
        return h, c


class StackedLSTM(nn.Module):
    """Embedding -> L (bi)LSTM layers unrolled over the sequence -> shared per-step output layer.

    Input: (N, T) token ids. Output: (N, T, vocab) logits. Each layer's cells
    are called once per step with the same weights; a bidirectional layer runs
    a second cell over the reversed steps and concatenates the two outputs of
    each step (2 x hidden), which is the next layer's input.
    """

    def __init__(self, layers: int, hidden: int, vocab: int, embed: int, bidirectional: bool) -> None:
        super().__init__()
        self.hidden = hidden
        self.bidirectional = bidirectional
        dirs = 2 if bidirectional else 1
        self.embed = nn.Embedding(vocab, embed)
        self.forward_cells = nn.ModuleList()
        self.backward_cells = nn.ModuleList()
        for layer in range(layers):
            size = embed if layer == 0 else dirs * hidden
            self.forward_cells.append(LSTMCell(size, hidden))
            if bidirectional:
                self.backward_cells.append(LSTMCell(size, hidden))
        self.decoder = nn.Linear(dirs * hidden, vocab)

    def _run(self, cell: LSTMCell, steps: list[torch.Tensor], zeros: torch.Tensor) -> list[torch.Tensor]:
        h, c = zeros, zeros
        out = []
        for x in steps:
            h, c = cell(x, h, c)
            out.append(h)
        return out

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        batch = tokens.shape[0]
        steps = list(self.embed(tokens).unbind(1))
        for layer, cell in enumerate(self.forward_cells):
            zeros = steps[0].new_zeros(batch, self.hidden)
            fwd = self._run(cell, steps, zeros)
            if self.bidirectional:
                bwd = self._run(self.backward_cells[layer], steps[::-1], zeros)[::-1]
                steps = [torch.cat([a, b], dim=1) for a, b in zip(fwd, bwd)]
            else:
                steps = fwd
        return self.decoder(torch.stack(steps, dim=1))


def _make(name: str, *, layers: int, hidden_k: int, bidirectional: bool, seq_len: int = SEQ_LEN,
          vocab: int = VOCAB, hidden: int | None = None, embed: int | None = None) -> ModelSpec:
    hidden = hidden if hidden is not None else hidden_k * 1024
    embed = embed if embed is not None else hidden
    kind = "bidirectional LSTM" if bidirectional else "LSTM"
    config = {"layers": layers, "hidden": hidden, "embed": embed, "vocab": vocab, "seq_len": seq_len,
              "bidirectional": bidirectional}
    return ModelSpec(
        name=name, family="brnn" if bidirectional else "rnn", paper=PAPER,
        description=f"{layers}-layer {kind}, hidden {hidden}, {seq_len} steps, vocab {vocab}, "
                    "weights shared over steps",
        default_batch=128 if bidirectional else 256,
        build=partial(StackedLSTM, layers, hidden, vocab, embed, bidirectional),
        make_inputs=TokenBatch(seq_len, vocab),
        loss=losses.sequence,
        config=config,
    )


_OVERRIDES = {
    "seq_len": f"unrolled time steps (default {SEQ_LEN})",
    "vocab": f"vocabulary size (default {VOCAB})",
    "hidden": "hidden units per layer (default X*1024 from the name)",
    "embed": "embedding width (default: the hidden size)",
}

FAMILIES = [
    Family("rnn", r"rnn-(?P<layers>[1-9]\d*)-(?P<hidden_k>[1-9]\d*)k", "rnn-{L}-{X}k", ("rnn-8-8k",),
           partial(_make, bidirectional=False), _OVERRIDES),
    Family("brnn", r"brnn-(?P<layers>[1-9]\d*)-(?P<hidden_k>[1-9]\d*)k", "brnn-{L}-{X}k", ("brnn-4-8k",),
           partial(_make, bidirectional=True), _OVERRIDES),
]
