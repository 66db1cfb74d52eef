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
from pathlib import Path
from typing import Any

from converter.output import as_json
from kernel_corpus.bindings import Binding, In, NodeInfo, OpDef, Out, Scalar, Shape, Temp
from kernel_corpus.bindings import registry as default_registry
from kernel_corpus.reference import shape_node

INDEX_PATH = Path(__file__).parent / "index.json"
SCHEMA = 2  # 2: launch arguments typed ({"kind": "in", "index": 0}), shapes from the op definitions


def reference_shapes(registry: Any = None) -> list[tuple[OpDef, Shape]]:
    """Every (op, shape) the index evaluates: all shapes of every op definition, tested and model-sized."""
    return [(d, s) for d in (registry or default_registry).ops() for s in d.shapes]


# ---- building the index -----------------------------------------------------------------------------------
def sha256_text(text: str) -> str:
    """Digest of a source text (a changed source drops carried-over results)."""
    return hashlib.sha256(text.encode()).hexdigest()


def kernel_entries(source: str, text: str, outcome) -> dict[str, dict]:
    """One entry per legacy kernel of a source: converter metadata or the refusal."""
    meta = {rk.name: rk for rk in outcome.rkernels}
    entries = {}
    for k in outcome.kernels:
        rk = meta.get(k.name)
        entries[k.name] = {
            "kernel": k.name, "source": source, "source_sha256": sha256_text(text),
            "status": k.status, "reason": k.reason,
            "rkernel": rk and rk.rkernel, "template_params": as_json(rk.template_params if rk else []),
            "params": as_json(rk.params if rk else []), "static_smem_bytes": rk and rk.static_smem_bytes,
            "dynamic_smem": rk and rk.dynamic_smem, "layout": rk and rk.layout,
            "barrier_sites": as_json(rk.barrier_sites if rk else []), "features": k.features,
            "launch_bounds": rk and rk.launch_bounds,
            "bindings": [], "instances": {}, "rtasks": [], "profile": {},
        }
    return entries


def add_evaluations(entries: dict[tuple[str, str], dict], refs: list[tuple[OpDef, Shape]]) -> list[str]:
    """Evaluate every binding at the reference shapes of its op; returns problems (one line each)."""
    problems = []
    nodes = {(d.op_type, s.key(d.op_type)): shape_node(d, s, s.key(d.op_type)) for d, s in refs}
    ops = {d.op_type: d for d, _ in refs}
    for d in ops.values():
        for b in d.bindings:
            add_binding(entries, b, [n for (op, _), n in nodes.items() if op == d.op_type], problems)
    return problems


def add_binding(entries: dict[tuple[str, str], dict], b: Binding, nodes: list[NodeInfo], problems: list[str]) -> None:
    """List one binding under each kernel it launches, with its launch geometry at each node it applies to."""
    for k in b.kernels:
        entry = entries.get((b.source, k))
        if entry is None:
            problems.append(f"binding {b.name}: kernel {k} is not in the converter's view of {b.source}")
            continue
        entry["bindings"].append({"op_type": b.op_type, "variant": b.variant, "kind": b.kind, "note": b.note,
                                  "backend": b.backend})
    for node in nodes:
        if not b.applies(node):
            continue
        for launch in b.launch(node):
            entry = entries.get((b.source, launch.kernel))
            if entry is None:
                continue
            entry["instances"].setdefault(launch.expr, {"template_args": list(launch.template_args)})
            entry["rtasks"].append({
                "shape": node.name, "op_type": b.op_type, "variant": b.variant, "instance": launch.expr,
                "grid": list(launch.grid), "block": list(launch.block), "threads_per_rtask": launch.threads,
                "rtasks": launch.rtasks, "dynamic_smem": launch.dynamic_smem})


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
    if not entry["rtasks"]:
        return None
    ev = min(entry["rtasks"], key=lambda r: (r["rtasks"] * r["threads_per_rtask"], r["shape"]))
    d, s = next((d, s) for d, s in reference_shapes() if d.op_type == ev["op_type"] and s.key(d.op_type) == ev["shape"])
    node = shape_node(d, s, ev["shape"])
    launches = default_registry.get(ev["op_type"], ev["variant"]).launch(node)
    return next((la, node) for la in launches if la.kernel == entry["kernel"] and la.expr == ev["instance"])


def launch_spec(launch, node) -> dict:
    """A launch spec (docs/ARCHITECTURE.md §3) for one corpus launch: inputs random in [0.5, 1.5) (valid
    divisors and variances), outputs and temps zeroed and compared, scalars as the binding computed them."""
    args, outputs = [], []
    for i, a in enumerate(launch.args):
        name = f"a{i}"
        if isinstance(a, Scalar):
            args.append({"name": name, "kind": "scalar", "dtype": a.dtype, "value": a.value})
            continue
        if isinstance(a, In):
            args.append({"name": name, "kind": "buffer", "dtype": "float32", "size": node.inputs[a.index].numel,
                         "init": "random", "low": 0.5, "high": 1.5})
            continue
        size = node.outputs[a.index].numel if isinstance(a, Out) else -(-a.nbytes // 4)
        dtype = a.dtype if isinstance(a, Temp) else "float32"
        args.append({"name": name, "kind": "buffer", "dtype": dtype, "size": size, "init": "zeros"})
        outputs.append(name)
    return {"kernel": launch.kernel, "template_args": list(launch.template_args), "grid": list(launch.grid),
            "block": list(launch.block), "dynamic_smem": launch.dynamic_smem, "seed": 0, "args": args,
            "outputs": outputs, "tolerance": 0}

