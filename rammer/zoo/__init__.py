"""Model zoo: the Rammer/IOS evaluation models as ONNX graphs with seeded random weights (`rammer zoo`)."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

from toolchain.files import Inputs, OutputError, first_bytes, write_atomic

from . import cnn, nasbench, nasnet, rnn, transformer
from .builder import PRODUCER, GraphBuilder


@dataclass(frozen=True)
class ZooModel:
    """How to build one model and what it is."""

    build: Callable[[GraphBuilder, int, bool], None]
    about: str
    opset: int = 17


MODELS: dict[str, ZooModel] = {
    "lstm-tc": ZooModel(rnn.lstm_tc, "10-layer LSTM, hidden 256, 100 steps"),
    "seq2seq": ZooModel(rnn.seq2seq, "8-layer LSTM encoder (100 steps) + 4-layer decoder (30 steps), h128"),
    "deepspeech2": ZooModel(rnn.deepspeech2, "300x161 spectrogram, 2 conv + 7 LSTM h256 + MatMul"),
    "resnext": ZooModel(cnn.resnext, "ResNeXt-29 16x64d, CIFAR 32x32"),
    "nasnet": ZooModel(nasnet.nasnet, "NASNet-A CIFAR 6@768 (structural approximation)"),
    "alexnet": ZooModel(cnn.alexnet, "AlexNet, 224x224"),
    "inception-v3": ZooModel(cnn.inception_v3, "Inception-V3, 299x299 (modules A-E)"),
    "squeezenet": ZooModel(cnn.squeezenet, "SqueezeNet 1.1, 224x224"),
    "transformer": ZooModel(transformer.transformer, "GPT-2 small: 12 layers, d 768, 12 heads, seq 64",
                            transformer.OPSET),
    "nasbench": ZooModel(nasbench.nasbench, "NASBench-101-style random cell (from --seed), 3x3 stacked"),
}
NAMES: tuple[str, ...] = tuple(MODELS)


def generate(name: str, batch: int = 1, small: bool = False, seed: int = 0) -> onnx.ModelProto:
    """Build model `name` at a fixed batch; `small` is the CPU-emulator size, `seed` fixes weights (and cell)."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(NAMES)}")
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    spec = MODELS[name]
    tag = f"{name}{'-small' if small else ''}-b{batch}-s{seed}"
    g = GraphBuilder(tag, seed=seed, opset=spec.opset)
    spec.build(g, batch, small)
    return g.model()


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded standard-normal float32 values for every graph input that is not an initializer."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if any(d <= 0 for d in dims):
            raise ValueError(f"input {vi.name!r} has a non-static shape {dims}")
        feeds[vi.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def zoo_command(name: str | None, out: str | None, batch: int = 1, small: bool = False, seed: int = 0,
                list_: bool = False, force: bool = False) -> int:
    """CLI body of `rammer zoo NAME -o model.onnx [--batch B] [--small] [--seed S]` and `rammer zoo --list`."""
    if list_:
        for n in NAMES:
            print(f"{n:14s} {MODELS[n].about}")
        return 0
    if not name or not out:
        return _fail("give a model NAME and -o OUT.onnx (or --list)")
    try:
        path = Inputs().check_file(out, "-o", ours=_own_model, force=force, tool="rammer zoo")
    except OutputError as e:
        return _fail(str(e))
    try:
        model = generate(name, batch, small, seed)
    except ValueError as e:
        return _fail(str(e))
    try:
        write_atomic(path, model.SerializeToString())
    except OSError as e:
        return _fail(f"cannot write {str(path)!r}: {e.strerror or e}")
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    print(f"{path}: {name}{' (small)' if small else ''}, batch {batch}, {len(model.graph.node)} nodes, "
          f"{params} parameters, opset {model.opset_import[0].version}")
    return 0


def _own_model(path: Path) -> bool:
    """Whether a file is a model `rammer zoo` wrote: its producer name (serialized near the start)."""
    return PRODUCER.encode() in first_bytes(path, 64)


def _fail(message: str) -> int:
    """One clear error line; the exit status for the CLI."""
    print(f"rammer zoo: {message}", file=sys.stderr)
    return 2
