"""Run a binding's legacy launches for one node on the CPU emulator (cuda_emu) with numpy buffers."""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable

import numpy as np

from kernel_corpus.bindings import Arg, Binding, In, Launch, NodeInfo, Out, Scalar, Temp

SCALAR_TYPES = {"int32": np.int32, "int64": np.int64, "uint32": np.uint32, "float32": np.float32,
                "float64": np.float64}


def kernel_exprs(pairs: Iterable[tuple[Binding, NodeInfo]]) -> dict[str, list[str]]:
    """Per source file, the kernel expressions these (binding, node) pairs launch: one module per file."""
    exprs: dict[str, set[str]] = defaultdict(set)
    for binding, node in pairs:
        exprs[binding.source] |= {launch.expr for launch in binding.launch(node)}
    return {source: sorted(found) for source, found in exprs.items()}


def build_module(source: str, exprs: list[str], sanitize: str | tuple[str, ...] | None = None):
    """A CpuModule of one legacy source file instantiating the given kernel expressions (with the emulator's
    sanitizers when asked: "all", or some of memcheck, racecheck, synccheck)."""
    from cuda_emu import CpuModule  # imported late: the emulator is optional for the rest of the corpus

    from kernel_corpus.bindings import LEGACY_DIR
    return CpuModule((LEGACY_DIR / source).read_text(), kernels=exprs, include_dirs=[str(LEGACY_DIR)],
                     name=str(LEGACY_DIR / source), sanitize=sanitize)


def _argument(arg: Arg, inputs: list[np.ndarray | None], outputs: list[np.ndarray],
              temps: dict[str, np.ndarray]):
    """The numpy object the emulator receives for one launch argument."""
    if isinstance(arg, In):
        if inputs[arg.index] is None:
            raise ValueError(f"launch argument {arg} names an absent input")
        return inputs[arg.index]
    if isinstance(arg, Out):
        return outputs[arg.index]
    if isinstance(arg, Temp):
        if arg.name not in temps:  # NaN: nothing may rely on the contents (an int32 temp: the same bits)
            temps[arg.name] = np.full(-(-arg.nbytes // 4), np.nan, dtype=np.float32).view(arg.dtype)
        return temps[arg.name]
    if isinstance(arg, Scalar):
        return SCALAR_TYPES[arg.dtype](arg.value)
    raise ValueError(f"unknown launch argument {arg!r}")


def _arg_name(arg: Arg, node: NodeInfo) -> str:
    """A launch argument's name in sanitizer reports: in0, out1, the temp's name."""
    if isinstance(arg, In):
        return f"in{arg.index}"
    if isinstance(arg, Out):
        return f"out{arg.index}"
    return arg.name if isinstance(arg, Temp) else "scalar"


def run_launches(module, launches: list[Launch], node: NodeInfo,
                 inputs: list[np.ndarray | None]) -> list[np.ndarray]:
    """Launch in order; returns the outputs (float ones pre-filled with NaN so unwritten elements show)."""
    data = [None if x is None else np.asarray(x, dtype=np.float32 if t is None or t.dtype == "float32" else t.dtype,
                                              order="C")
            for x, t in zip(inputs, node.inputs + [None] * (len(inputs) - len(node.inputs)))]
    outputs = [np.full(t.shape, np.nan, dtype=np.float32) if t.dtype == "float32" else np.zeros(t.shape, t.dtype)
               for t in node.outputs]
    temps: dict[str, np.ndarray] = {}
    for launch in launches:
        args = [_argument(a, data, outputs, temps) for a in launch.args]
        names = [_arg_name(a, node) for a in launch.args]
        module.launch(launch.expr, launch.grid, launch.block, launch.dynamic_smem, args, names=names)
    return outputs
