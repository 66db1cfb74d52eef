"""Recurrent models of the Rammer evaluation: LSTM-TC, Seq2Seq, DeepSpeech2 (ONNX LSTM nodes)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .builder import GraphBuilder


@dataclass(frozen=True)
class LstmStack:
    """Sizes of a stack of LSTM layers run over a sequence."""

    steps: int
    hidden: int
    layers: int


def stack(g: GraphBuilder, x: str, hidden: int, layers: int, init: list[tuple[str, str]] | None = None,
          states: bool = False) -> tuple[str, list[tuple[str, str]]]:
    """Stacked unidirectional LSTM layers; returns the top sequence and each layer's final (h, c) if asked."""
    finals = []
    for layer in range(layers):
        x, h, c = g.lstm(x, hidden, init[layer] if init else None, states)
        finals.append((h, c))
    return x, finals


def lstm_tc(g: GraphBuilder, batch: int, small: bool) -> None:
    """LSTM-TC: 10 stacked LSTM layers, hidden 256, input size = hidden, 100 steps (Rammer Table 1)."""
    s = LstmStack(8, 32, 3) if small else LstmStack(100, 256, 10)
    x = g.input("input", (s.steps, batch, s.hidden))
    y, _ = stack(g, x, s.hidden, s.layers)
    g.output(y, "output")


def seq2seq(g: GraphBuilder, batch: int, small: bool) -> None:
    """Seq2Seq: 8-layer encoder over 100 steps, 4-layer decoder over 30 steps, hidden 128.

    The decoder's input is a fixed tensor (teacher forcing with a constant target); decoder layer i starts
    from the final (h, c) of encoder layer L_enc - L_dec + i, i.e. the top encoder layers.
    """
    enc, dec = (LstmStack(8, 32, 2), LstmStack(4, 32, 2)) if small else \
        (LstmStack(100, 128, 8), LstmStack(30, 128, 4))
    x = g.input("input", (enc.steps, batch, enc.hidden))
    _, finals = stack(g, x, enc.hidden, enc.layers, states=True)
    step_in = g.rng.standard_normal((dec.steps, 1, dec.hidden), dtype=np.float32)
    dec_in = g.const(np.repeat(step_in, batch, axis=1), "decoder_input")  # same for every sample
    y, _ = stack(g, dec_in, dec.hidden, dec.layers, init=finals[enc.layers - dec.layers:])
    g.output(y, "output")


@dataclass(frozen=True)
class SpeechConfig:
    """DeepSpeech2 sizes: spectrogram, two conv layers, LSTM stack, alphabet."""

    frames: int
    features: int
    channels: int
    kernels: tuple[tuple[int, int], tuple[int, int]]
    strides: tuple[tuple[int, int], tuple[int, int]]
    hidden: int
    layers: int
    classes: int


def deepspeech2(g: GraphBuilder, batch: int, small: bool) -> None:
    """DeepSpeech2: 2 Conv+BN+Relu over (time, frequency), 7 unidirectional LSTM h256, a final MatMul.

    Input [N, 1, 300, 161]; the conv output [N, C, T', F'] is transposed to [T', N, C, F'] and reshaped to
    [T', N, C*F'] as the LSTM input; the head maps each step to 29 characters.
    """
    cfg = SpeechConfig(24, 33, 8, ((5, 11), (5, 7)), ((2, 2), (1, 2)), 32, 2, 29) if small else \
        SpeechConfig(300, 161, 32, ((11, 41), (11, 21)), ((2, 2), (1, 2)), 256, 7, 29)
    x = g.input("input", (batch, 1, cfg.frames, cfg.features))
    for k, s in zip(cfg.kernels, cfg.strides):
        x = g.conv_bn_relu(x, cfg.channels, k, s, (k[0] // 2, k[1] // 2))
    n, c, t, f = g.shapes[x]
    x = g.reshape(g.transpose(x, [2, 0, 1, 3]), (t, n, c * f))
    # The first LSTM maps C*F' features to the hidden size; the rest are hidden -> hidden.
    y, _ = stack(g, x, cfg.hidden, cfg.layers)
    g.output(g.matmul(y, cfg.classes), "output")


