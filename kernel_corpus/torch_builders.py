"""Helpers for the PyTorch baseline builders that op definitions carry (`OpDef.torch`).

A builder is `(torch, attrs, consts, nout) -> callable`: `consts[i]` is the value of input i when it is a
constant (an initializer) and None otherwise, so shape-like inputs (Slice bounds, split sizes, axes) are read once
as Python ints and the callable holds no device-to-host reads (static for torch.compile). torch itself is never
imported here: rammer's bench passes the module in."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

TorchBuilder = Callable[[Any, dict, list, int], Callable]


def const_ints(k: list, i: int, default: list[int] | None = None) -> list[int] | None:
    """Constant int input i as a list (None/absent gives the default)."""
    if i < len(k) and k[i] is not None:
        return [int(v) for v in np.asarray(k[i]).reshape(-1)]
    return default


def need_const(k: list, i: int, op: str) -> list[int]:
    """A shape-like input that must be a constant for the torch interpreter."""
    v = const_ints(k, i)
    if v is None:
        raise ValueError(f"{op}: input {i} must be a constant (initializer) for the torch interpreter")
    return v


def spatial_pads(a: dict, rank: int, op: str) -> tuple[list[int], list[int] | None]:
    """ONNX pads [b1.., e1..] as torch's symmetric padding, or F.pad's list when asymmetric."""
    if a.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
        raise ValueError(f"{op}: auto_pad={a['auto_pad']} is not supported by the torch interpreter")
    pads = a.get("pads", [0] * 2 * rank)
    begin, end = pads[:rank], pads[rank:]
    if begin == end:
        return begin, None
    torch_pad = []
    for b, e in zip(reversed(begin), reversed(end)):
        torch_pad += [b, e]
    return [0] * rank, torch_pad


def torch_function(path: str) -> TorchBuilder:
    """A builder for ops that are one torch function of their runtime inputs ('add', 'nn.functional.relu')."""
    def build(T, a: dict, k: list, nout: int) -> Callable:
        fn = T
        for part in path.split("."):
            fn = getattr(fn, part)
        return fn
    return build
