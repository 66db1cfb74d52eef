"""The corpus index: every rKernel of kernel_corpus/legacy with what a scheduler needs to know before running it.

Per legacy kernel: conversion status (or the refusal), rKernel metadata (shared memory, barrier sites,
features), the bindings (op type, variant) that launch it, rTask count and threads per rTask evaluated at
reference shapes (the bindings compute geometry in code, so the index stores evaluations, not formulas),
ptxas registers / spills / static shared memory per instantiation when nvcc is found, the verification
status per instantiation, and `profile: {device: {shape_key: us_per_rtask}}` for the profiler to fill.

This module holds the index's data model and the parts that need only the corpus; `rtransform index
[--verify] [--no-nvcc] [-o PATH]` (rtransform/corpus_index.py, which converts and compiles) regenerates
kernel_corpus/index.json. Profiles and verification results of kernels whose source is unchanged are carried
over from the previous index (a changed source drops them: they described other code).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

INDEX_PATH = Path(__file__).parent / "index.json"
OPSET = 20  # Gelu needs 20
CONST_INPUTS = ("starts", "ends", "axes", "steps", "split")  # ONNX inputs the bindings read as attributes
SCHEMA = 1


@dataclass
class RefShape:
    """One reference node: float input shapes, attributes; outputs from ONNX shape inference unless given."""
    op_type: str
    inputs: tuple                 # shapes; None marks an absent optional input (custom ops)
    attrs: dict[str, Any] = field(default_factory=dict)
    outputs: tuple | None = None  # custom ops (no ONNX schema) give their output shapes

    def key(self) -> str:
        """Readable shape key, unique per reference node: `Conv(1x16x32x32, 32x16x3x3; pads=1,1,1,1)`."""
        shapes = ", ".join("-" if s is None else "x".join(map(str, s)) if s else "scalar" for s in self.inputs)
        attrs = "; ".join(f"{k}={_attr_text(v)}" for k, v in sorted(self.attrs.items()))
        return f"{self.op_type}({shapes}{'; ' + attrs if attrs else ''})"


def _attr_text(v: Any) -> str:
    return ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)


def _same(ops: tuple[str, ...], *shapes: tuple, **attrs: Any) -> list[RefShape]:
    return [RefShape(op, shapes, dict(attrs)) for op in ops]


BINARY = ("Add", "Sub", "Mul", "Div")
UNARY = ("Relu", "Sigmoid", "Tanh", "Gelu")
POOL = ("MaxPool", "AveragePool")
REFERENCE_SHAPES: list[RefShape] = [
    RefShape("MatMul", ((1, 256), (256, 512))),
    RefShape("MatMul", ((64, 128), (128, 96))),
    RefShape("MatMul", ((2, 32, 64), (64, 48))),
    RefShape("MatMul", ((1, 2048), (2048, 64))),
    RefShape("Gemm", ((1, 512), (1024, 512), (1024,)), {"transB": 1}),
    RefShape("Gemm", ((64, 128), (128, 256), (256,))),
    RefShape("Gemm", ((1, 1024), (1024, 256), (256,))),
    RefShape("FusedMatMul", ((1, 64, 768), (768, 2304), (2304,)), outputs=((1, 64, 2304),)),   # projection + bias
    RefShape("FusedMatMul", ((1, 12, 64, 64), (1, 12, 64, 64), (1, 1, 64, 64)), {"alpha": 0.125},
             outputs=((1, 12, 64, 64),)),                                                     # scaled, masked scores
    RefShape("FusedMatMul", ((1, 256), (256, 1024), (1024,)), outputs=((1, 1024),)),        # GEMV + bias
    RefShape("FusedGemm", ((1, 9216), (4096, 9216), (4096,)), {"transB": 1, "activation": "Relu"},
             outputs=((1, 4096),)),                                                           # AlexNet fc6 + Relu
    RefShape("FusedConv", ((1, 64, 32, 32), (64, 64, 3, 3), (64,)), {"pads": [1, 1, 1, 1], "activation": "Relu"},
             outputs=((1, 64, 32, 32),)),                                                     # conv + bias + Relu
    RefShape("Conv", ((1, 16, 32, 32), (32, 16, 3, 3)), {"pads": [1, 1, 1, 1]}),
    RefShape("Conv", ((1, 32, 16, 16), (32, 1, 3, 3), (32,)), {"group": 32, "pads": [1, 1, 1, 1]}),
    RefShape("Conv", ((1, 3, 64, 64), (16, 3, 7, 7)), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    *_same(BINARY, (4, 256), (4, 256)),
    *_same(BINARY, (2, 64, 8, 8), (64, 1, 1)),
    *_same(UNARY, (4, 1000)),
    *_same(UNARY, (1, 64, 28, 28)),
    RefShape("BatchNormalization", ((1, 64, 28, 28), (64,), (64,), (64,), (64,))),
    RefShape("LSTMCellPointwise", ((1, 1024), (1, 256)), outputs=((1, 256), (1, 256))),
    RefShape("LSTMCellPointwise", ((8, 512), (8, 128)), outputs=((8, 128), (8, 128))),
    *[RefShape("LSTMCell", (x, wt, (b, h), (h, 4 * h), pre, (b, h)), outputs=((b, h), (b, h)))
      for b, h, x, wt, pre in [(1, 256, (1, 256), (256, 1024), (1024,)),     # stacked layer step, batch 1
                               (1, 256, None, None, (1, 1024)),               # hoisted input projection
                               (3, 100, (3, 37), (37, 400), (400,)),          # odd sizes
                               (8, 128, None, None, (8, 512))]],              # more rows than one rTask takes
    RefShape("Concat", ((1, 32, 8, 8), (1, 16, 8, 8)), {"axis": 1}),
    RefShape("Split", ((1, 48, 8, 8),), {"axis": 1, "split": [16, 32]}),
    RefShape("Slice", ((4, 64),), {"starts": [0], "ends": [32], "axes": [1]}),
    RefShape("Transpose", ((2, 3, 4, 5),), {"perm": [0, 2, 3, 1]}),
    RefShape("Transpose", ((128, 256),), {"perm": [1, 0]}),
    *_same(POOL, (1, 16, 32, 32), kernel_shape=[2, 2], strides=[2, 2]),
    *_same(POOL, (1, 64, 56, 56), kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    RefShape("Softmax", ((8, 1000),), {"axis": -1}),
    RefShape("Softmax", ((64, 128),), {"axis": -1}),
    RefShape("LayerNormalization", ((16, 768), (768,), (768,)), {"axis": -1}),
    RefShape("GlobalAveragePool", ((1, 512, 7, 7),)),
]


def reference_node(ref: RefShape):
    """The NodeInfo of a reference shape; output shapes by ONNX shape inference (strict)."""
    import onnx
    from kernel_corpus.bindings import NodeInfo, TensorInfo
    if ref.outputs is not None:
        outputs = list(ref.outputs)
    else:
        inferred = onnx.shape_inference.infer_shapes(reference_model(ref), strict_mode=True)
        outputs = [tuple(d.dim_value for d in o.type.tensor_type.shape.dim) for o in inferred.graph.output]
    inputs = [None if s is None else TensorInfo(s) for s in ref.inputs]
    if ref.op_type == "Slice":
        inputs += [TensorInfo((len(v),), "int64") for k, v in ref.attrs.items() if k in CONST_INPUTS]
    return NodeInfo(ref.op_type, ref.key(), inputs, [TensorInfo(s) for s in outputs], dict(ref.attrs), OPSET)


def reference_model(ref: RefShape):
    """A one-node ONNX model of a reference shape; constant operands become int64 initializers."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    consts = {k: v for k, v in ref.attrs.items() if k in CONST_INPUTS}
    attrs = {k: v for k, v in ref.attrs.items() if k not in consts}
    names = [f"x{i}" for i in range(len(ref.inputs))]
    if ref.op_type == "Slice":
        names += [k if k in consts else "" for k in ("starts", "ends", "axes", "steps")]
    elif "split" in consts:
        names.append("split")
    while names and not names[-1]:
        names.pop()
    outs = [f"y{i}" for i in range(len(consts["split"]) if "split" in consts else 1)]
    graph = helper.make_graph(
        [helper.make_node(ref.op_type, names, outs, **attrs)], "ref",
        [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, s) for i, s in enumerate(ref.inputs)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        initializer=[numpy_helper.from_array(np.array(v, dtype=np.int64), k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


# ---- building the index -----------------------------------------------------------------------------------
def sha256_text(text: str) -> str:
    """Digest of a source text (a changed source drops carried-over results)."""
    return hashlib.sha256(text.encode()).hexdigest()


def kernel_entries(source: str, text: str, outcome) -> dict[str, dict]:
    """One entry per legacy kernel of a source: converter metadata or the refusal."""
    meta = {rk["name"]: rk for rk in outcome.rkernels}
    entries = {}
    for k in outcome.kernels:
        rk = meta.get(k.name, {})
        entries[k.name] = {
            "kernel": k.name, "source": source, "source_sha256": sha256_text(text),
            "status": k.status, "reason": k.reason,
            "rkernel": rk.get("rkernel"), "template_params": rk.get("template_params", []),
            "params": rk.get("params", []), "static_smem_bytes": rk.get("static_smem_bytes"),
            "dynamic_smem": rk.get("dynamic_smem"), "layout": rk.get("layout"),
            "barrier_sites": rk.get("barrier_sites", []), "features": k.features,
            "launch_bounds": rk.get("launch_bounds"),
            "bindings": [], "instances": {}, "rtasks": [], "profile": {},
        }
    return entries


def add_evaluations(entries: dict[tuple[str, str], dict], bindings, refs: list[RefShape]) -> list[str]:
    """Evaluate every binding at the reference shapes of its op type; returns problems (one line each)."""
    problems = []
    for b in bindings:
        for k in b.kernels:
            entry = entries.get((b.source, k))
            if entry is None:
                problems.append(f"binding {b.name}: kernel {k} is not in the converter's view of {b.source}")
                continue
            entry["bindings"].append({"op_type": b.op_type, "variant": b.variant, "kind": b.kind, "note": b.note})
        for ref in (r for r in refs if r.op_type == b.op_type):
            node = reference_node(ref)
            if b.applies(node) is not True:
                continue
            for launch in b.launch(node):
                entry = entries.get((b.source, launch.kernel))
                if entry is None:
                    continue
                entry["instances"].setdefault(launch.expr, {"template_args": list(launch.template_args)})
                entry["rtasks"].append({
                    "shape": ref.key(), "op_type": b.op_type, "variant": b.variant, "instance": launch.expr,
                    "grid": list(launch.grid), "block": list(launch.block), "threads_per_rtask": launch.threads,
                    "rtasks": launch.rtasks, "dynamic_smem": launch.dynamic_smem})
    return problems


def carry_over(entries: dict[tuple[str, str], dict], previous: dict | None) -> None:
    """Keep the profiles and verification results of kernels whose source text is unchanged."""
    for old in (previous or {}).get("rkernels", []):
        entry = entries.get((old.get("source"), old.get("kernel")))
        if entry is None or old.get("source_sha256") != entry["source_sha256"]:
            continue
        entry["profile"] = old.get("profile", {})
        for expr, inst in old.get("instances", {}).items():
            if expr in entry["instances"] and "verified" in inst:
                entry["instances"][expr]["verified"] = inst["verified"]


def load_index(path: Path = INDEX_PATH) -> dict | None:
    """The index on disk, or None when there is none (or it cannot be read)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def smallest_launch(entry: dict):
    """(Launch, NodeInfo) of the entry's reference evaluation with the least work (rTasks x threads)."""
    from kernel_corpus.bindings import registry
    if not entry["rtasks"]:
        return None
    ev = min(entry["rtasks"], key=lambda r: (r["rtasks"] * r["threads_per_rtask"], r["shape"]))
    ref = next(r for r in REFERENCE_SHAPES if r.key() == ev["shape"])
    node = reference_node(ref)
    launches = registry.get(ev["op_type"], ev["variant"]).launch(node)
    return next((la, node) for la in launches if la.kernel == entry["kernel"] and la.expr == ev["instance"])


def launch_spec(launch, node) -> dict:
    """A launch spec (docs/ARCHITECTURE.md §3) for one corpus launch: inputs random in [0.5, 1.5) (valid
    divisors and variances), outputs and temps zeroed and compared, scalars as the binding computed them."""
    args, outputs = [], []
    for i, a in enumerate(launch.args):
        name = f"a{i}"
        if a[0] == "scalar":
            args.append({"name": name, "kind": "scalar", "dtype": a[1], "value": a[2]})
            continue
        if a[0] == "in":
            args.append({"name": name, "kind": "buffer", "dtype": "float32", "size": node.inputs[a[1]].numel,
                         "init": "random", "low": 0.5, "high": 1.5})
            continue
        size = node.outputs[a[1]].numel if a[0] == "out" else -(-a[2] // 4)
        args.append({"name": name, "kind": "buffer", "dtype": "float32", "size": size, "init": "zeros"})
        outputs.append(name)
    return {"kernel": launch.kernel, "template_args": list(launch.template_args), "grid": list(launch.grid),
            "block": list(launch.block), "dynamic_smem": launch.dynamic_smem, "seed": 0, "args": args,
            "outputs": outputs, "tolerance": 0}

