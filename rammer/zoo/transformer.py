"""GPT-2-small-sized decoder stack at batch 1: pre-LN blocks with causal self-attention and a Gelu MLP.

Uses the ONNX `Gelu` operator, which exists from opset 20, so this model is emitted at opset 20 (every
other zoo model is opset 17). The input is the embedded sequence [N, S, d] (token embedding needs Gather,
which the corpus does not bind); the output is the final LayerNorm's hidden states (no vocabulary head).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .builder import GraphBuilder

OPSET = 20
MASKED = -1e9  # added to scores above the diagonal; exp() of it underflows to exactly 0


@dataclass(frozen=True)
class GptConfig:
    """Sequence length, model width, heads, layers; the MLP is 4 x width."""

    seq: int
    d: int
    heads: int
    layers: int


def _heads(g: GraphBuilder, x: str, cfg: GptConfig, perm: list[int]) -> str:
    """[N, S, d] -> [N, S, H, d/H] -> permuted per-head layout."""
    n, s, _ = g.shapes[x]
    return g.transpose(g.reshape(x, (n, s, cfg.heads, cfg.d // cfg.heads)), perm)


def _attention(g: GraphBuilder, x: str, cfg: GptConfig, mask: str) -> str:
    """Causal multi-head self-attention: fused QKV projection, scaled scores + mask, Softmax, output proj."""
    n, s, d = g.shapes[x]
    q, k, v = g.split(g.linear(x, 3 * d), [d, d, d], axis=2)
    q, k, v = _heads(g, q, cfg, [0, 2, 1, 3]), _heads(g, k, cfg, [0, 2, 3, 1]), _heads(g, v, cfg, [0, 2, 1, 3])
    scores = g.op("MatMul", [q, k], (n, cfg.heads, s, s))
    scale = g.const(np.asarray(1.0 / np.sqrt(d // cfg.heads), dtype=np.float32), "scale")
    probs = g.unary("Softmax", g.add(g.binary("Mul", scores, scale), mask), axis=-1)
    ctx = g.op("MatMul", [probs, v], (n, cfg.heads, s, d // cfg.heads))
    ctx = g.reshape(g.transpose(ctx, [0, 2, 1, 3]), (n, s, d))
    return g.linear(ctx, d, std=0.02)


def _block(g: GraphBuilder, x: str, cfg: GptConfig, mask: str) -> str:
    """x + attn(LN(x)), then + MLP(LN(.)) with Gelu."""
    x = g.add(x, _attention(g, g.layer_norm(x), cfg, mask))
    hidden = g.unary("Gelu", g.linear(g.layer_norm(x), 4 * cfg.d))
    return g.add(x, g.linear(hidden, cfg.d, std=0.02))


def transformer(g: GraphBuilder, batch: int, small: bool) -> None:
    """GPT-2 small: 12 layers, d = 768, 12 heads, sequence 64; --small: 2 layers, d = 64, 2 heads, seq 16."""
    cfg = GptConfig(16, 64, 2, 2) if small else GptConfig(64, 768, 12, 12)
    x = g.input("input", (batch, cfg.seq, cfg.d))
    mask = g.const(np.triu(np.full((cfg.seq, cfg.seq), MASKED, dtype=np.float32), k=1), "causal_mask")
    for _ in range(cfg.layers):
        x = _block(g, x, cfg, mask)
    g.output(g.layer_norm(x), "output")
