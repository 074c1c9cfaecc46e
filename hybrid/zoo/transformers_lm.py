"""GPT-2 and Llama causal language models built from configs by Hugging Face `transformers`.

Not from the papers this project implements: they are here so plans can be made for current
transformer workloads. `transformers` is an optional extra
(`pip install 'hybrid-offload[transformers]'`) imported only when a model is built, so
the zoo lists these models without it. Defaults are small (2 layers, width 256,
128 tokens) so a graph captures quickly; overrides use the Hugging Face config
names (`n_layer`, `hidden_size`, ...) to scale them up. Weights are random
(no download). Attention is the "eager" implementation (matmul + softmax),
portable to any device; GPT-2 keeps its dropout. The module returns the logits
tensor; the loss is next-token cross-entropy at every position.
"""
from __future__ import annotations

from functools import partial
from typing import Any

import torch
import torch.nn as nn

from hybrid.errors import HybridError
from hybrid.zoo import losses
from hybrid.zoo.inputs import TokenBatch
from hybrid.zoo.registry import Family, ModelSpec

PAPER = "none (transformer workloads beyond the papers)"


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise HybridError("GPT-2 and Llama models need Hugging Face transformers: "
                          "pip install 'hybrid-offload[transformers]'") from None
    return transformers


class CausalLM(nn.Module):
    """A `transformers` causal LM that maps (N, T) token ids to (N, T, vocab) logits."""

    def __init__(self, kind: str, config: dict[str, Any]) -> None:
        super().__init__()
        tf = _transformers()
        if kind == "gpt2":
            cfg = tf.GPT2Config(**config)
            cls = tf.GPT2LMHeadModel
        else:
            cfg = tf.LlamaConfig(**config)
            cls = tf.LlamaForCausalLM
        cfg._attn_implementation = "eager"
        cfg.use_cache = False
        self.model = cls(cfg)

        # transformers >= 4.53 builds masks with data-dependent checks (`.all()`), which fail on the meta
        # device; a ready 4D additive mask is used as given. Older versions mask GPT-2 with a buffer and
        # reshape any mask they get to 2D, so they get none.
        import importlib.util

        self.pass_mask = importlib.util.find_spec("transformers.masking_utils") is not None

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if not self.pass_mask:
            return self.model(input_ids=tokens, use_cache=False).logits
        n = tokens.shape[1]
        dtype = self.model.get_input_embeddings().weight.dtype
        mask = torch.full((n, n), torch.finfo(dtype).min, dtype=dtype, device=tokens.device).triu(1)
        return self.model(input_ids=tokens, attention_mask=mask[None, None], use_cache=False).logits


def _gpt2(name: str, *, n_layer: int = 2, n_embd: int = 256, n_head: int = 4, vocab_size: int = 50257,
          seq_len: int = 128) -> ModelSpec:
    if n_embd % n_head:
        raise HybridError(f"model 'gpt2': n_embd={n_embd} must be a multiple of n_head={n_head}")
    config = {"n_layer": n_layer, "n_embd": n_embd, "n_head": n_head, "vocab_size": vocab_size,
              "n_positions": max(seq_len, 1024)}
    return ModelSpec(
        name="gpt2", family="gpt2", paper=PAPER,
        description=f"GPT-2 (transformers), {n_layer} layers, width {n_embd}, {seq_len} tokens",
        default_batch=8, build=partial(CausalLM, "gpt2", config),
        make_inputs=TokenBatch(seq_len, vocab_size), loss=losses.sequence,
        config={**config, "seq_len": seq_len},
    )


def _llama(name: str, *, num_hidden_layers: int = 2, hidden_size: int = 256, num_attention_heads: int = 4,
           num_key_value_heads: int | None = None, intermediate_size: int = 688, vocab_size: int = 32000,
           seq_len: int = 128) -> ModelSpec:
    kv = num_key_value_heads if num_key_value_heads is not None else num_attention_heads
    if hidden_size % num_attention_heads or num_attention_heads % kv:
        raise HybridError(f"model 'llama': hidden_size={hidden_size} must be a multiple of "
                          f"num_attention_heads={num_attention_heads}, itself a multiple of num_key_value_heads={kv}")
    config = {"num_hidden_layers": num_hidden_layers, "hidden_size": hidden_size,
              "num_attention_heads": num_attention_heads, "num_key_value_heads": kv,
              "intermediate_size": intermediate_size, "vocab_size": vocab_size,
              "max_position_embeddings": max(seq_len, 2048)}
    return ModelSpec(
        name="llama", family="llama", paper=PAPER,
        description=f"Llama (transformers), {num_hidden_layers} layers, width {hidden_size}, {seq_len} tokens",
        default_batch=8, build=partial(CausalLM, "llama", config),
        make_inputs=TokenBatch(seq_len, vocab_size), loss=losses.sequence,
        config={**config, "seq_len": seq_len},
    )


FAMILIES = [
    Family("gpt2", r"gpt-?2", "gpt2", ("gpt2",), _gpt2,
           {"n_layer": "transformer blocks (default 2)", "n_embd": "width (default 256)",
            "n_head": "attention heads (default 4)", "vocab_size": "vocabulary (default 50257)",
            "seq_len": "tokens per sequence (default 128)"}),
    Family("llama", r"llama", "llama", ("llama",), _llama,
           {"num_hidden_layers": "decoder layers (default 2)", "hidden_size": "width (default 256)",
            "num_attention_heads": "attention heads (default 4)",
            "num_key_value_heads": "key/value heads (default: as many as attention heads)",
            "intermediate_size": "MLP width (default 688)", "vocab_size": "vocabulary (default 32000)",
            "seq_len": "tokens per sequence (default 128)"}),
]
