"""Per-operator kernel rates of a build: each GEMM / convolution node's own kernels (the plain legacy launches the
build runs it with, alone on the device) against the vendor library's call for the same node (cuBLAS through
`cupy.matmul`, cuDNN through `cupy.cudnn`, scheduler/backends/library.py), on the build's own buffers: time, TFLOP/s
and whether the two outputs agree. `rammer bench --kernels` prints them; tests/gpu/headline.py records them.

Times are medians of CUDA-event timings of `INNER` back-to-back issues of the node (so a kernel longer than a launch
is timed without the host's launch latency; a shorter one is launch-bound, and `launch_bound` says so). On the CPU
emulator the figures are wall-clock times of the emulator: they test the code path, they are no GPU figures.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterator

import numpy as np

INNER = 20                 # issues of a node between two events
LAUNCH_BOUND_US = 6.5      # at or below an eager launch's host interval (scheduler.dispatch_costs.EAGER_LAUNCH_US)


@dataclass
class KernelRate:
    """One node: its kernels and the library call, timed alone on the build's buffers."""

    node: str
    op_type: str
    variant: str
    kernels: list[str]
    flops: int
    ours_us: float
    library: str = ""
    library_us: float | None = None
    agree: bool | None = None      # the library's output equals ours within the bench's tolerance
    note: str = ""

    @property
    def ours_tflops(self) -> float:
        """Useful FLOP/s of our kernels, in TFLOP/s (the node's FLOPs, not the 3xTF32 split's)."""
        return self.flops / (self.ours_us * 1e-6) / 1e12 if self.ours_us > 0 else 0.0

    @property
    def library_tflops(self) -> float | None:
        """The library call's, in TFLOP/s."""
        return self.flops / (self.library_us * 1e-6) / 1e12 if self.library_us else None

    @property
    def launch_bound(self) -> bool:
        """Whether our time is no longer than a launch's host interval: the rate then says little about the kernel."""
        return self.ours_us <= LAUNCH_BOUND_US

    def to_json(self) -> dict[str, Any]:
        """A row (tests/gpu/headline.py results.jsonl)."""
        return asdict(self) | {"ours_tflops": round(self.ours_tflops, 3), "launch_bound": self.launch_bound,
                               "library_tflops": None if self.library_tflops is None else
                               round(self.library_tflops, 3)}


def node_infos(built: Any) -> dict[str, tuple[Any, Any]]:
    """(graph node, NodeInfo) of every node of the build's passed graph, by name: its model.onnx imported with the
    graph passes the build ran (build.json's pass log)."""
    from kernel_corpus.bindings import registry
    from scheduler.passes import PASSES
    from scheduler.pipeline import import_graph
    from scheduler.workload import node_info
    ran = {r.get("name") for r in built.manifest.stats.get("passes", [])}
    disabled = [p.name for p in PASSES if p.name not in ran] if ran else []
    g = import_graph(built.folder / "model.onnx", registry, disabled=disabled)
    return {n.name: (n, node_info(g, n, registry)) for n in g.nodes}


def host_copy(vd: Any, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor of the vDevice (a buffer or a view of one) copied to the host."""
    from .runtime import device_tensor
    gpu = vd.backend.name == "gpu"
    x = device_tensor(vd, name, shape, "float32", vd.backend.cp if gpu else np)
    return np.array(x.get() if gpu else x)


def kernel_rates(built: Any, backend: str = "gpu", repeats: int = 10, inner: int = INNER,
                 nodes: list[str] | None = None) -> list[KernelRate]:
    """Time each GEMM / convolution node of `built` (rammer.runtime.Built) as its own kernels and as the library's
    call, on the build's vDevice for `backend`; `nodes` limits which."""
    return list(iter_kernel_rates(built, backend, repeats, inner, nodes))


def iter_kernel_rates(built: Any, backend: str = "gpu", repeats: int = 10, inner: int = INNER,
                      nodes: list[str] | None = None) -> Iterator[KernelRate]:
    """kernel_rates, one node at a time (a caller that records each row keeps them if it is killed)."""
    from scheduler.backends import library
    from scheduler.plan import LibraryCall
    from vdevice.executors import CallStep, _median_ms, launch_op, run_call

    from .check import VARIANT_RTOL, relative_error
    from .runtime import library_step
    vd = built.vdevice(backend)
    if vd is None:
        return
    infos, variants, setup = node_infos(built), chosen_variants(built), set(built.manifest.setup)
    per_node: dict[str, list[int]] = {}
    for i, op in enumerate(built.ops):
        if i not in setup:
            per_node.setdefault(op.name.rsplit("#", 1)[0], []).append(i)
    for name, ops in per_node.items():
        node, info = infos.get(name, (None, None))
        impl = library.implementation(info.op_type) if info is not None else None
        if impl is None or (nodes is not None and name not in nodes):
            continue

        def ours(ops: list[int] = ops) -> None:
            for _ in range(inner):
                for i in ops:
                    launch_op(vd, i)

        row = KernelRate(name, info.op_type, variants.get(name, ""), [built.ops[i].kernel.wrapper for i in ops],
                         int(impl.flops(info)), round(_median_ms(vd.backend, repeats, ours) * 1e3 / inner, 3))
        outputs = [(t, tuple(i.shape)) for t, i in zip(node.outputs, info.outputs) if t and i is not None]
        mine = [host_copy(vd, t, shape) for t, shape in outputs]
        call = library.library_call(info, list(node.inputs), list(node.outputs), backend)
        if not isinstance(call, LibraryCall):
            row.note = f"no library call: {call.reason}"
            yield row
            continue
        step = CallStep(name, library_step(call))

        def theirs(step: CallStep = step) -> None:
            for _ in range(inner):
                run_call(vd, step)

        row.library = call.function
        row.library_us = round(_median_ms(vd.backend, repeats, theirs) * 1e3 / inner, 3)
        got = [host_copy(vd, t, shape) for t, shape in outputs]
        row.agree = relative_error(got, mine) <= VARIANT_RTOL
        yield row


def chosen_variants(built: Any) -> dict[str, str]:
    """The variant the plan chose for each node (plan.json's choices); empty when the plan cannot be read."""
    import json
    try:
        plan = json.loads((built.folder / "plan.json").read_text())
    except (OSError, ValueError):
        return {}
    return {node: str(c.get("variant", "")) for node, c in plan.get("choices", {}).items()}


def render(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of rates (KernelRate.to_json rows)."""
    def num(v: Any, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    lines = ["| node | op | variant | kernels | MFLOP | ours µs | ours TFLOP/s | library | library µs "
             "| library TFLOP/s | library/ours | outputs agree |", "|" + "---|" * 12]
    for r in rows:
        ratio = r["library_us"] / r["ours_us"] if r.get("library_us") and r["ours_us"] else None
        lines.append(f"| {r['node']} | {r['op_type']} | {r['variant']} | {', '.join(r['kernels'])} | "
                     f"{r['flops'] / 1e6:.1f} | {r['ours_us']:.2f}{' (launch-bound)' if r['launch_bound'] else ''} | "
                     f"{r['ours_tflops']:.2f} | {r.get('library') or '-'} | {num(r.get('library_us'), '.2f')} | "
                     f"{num(r.get('library_tflops'), '.2f')} | {num(ratio, '.2f')}{'x' if ratio else ''} | "
                     f"{'-' if r.get('agree') is None else ('yes' if r['agree'] else 'NO')}"
                     f"{' ' + r['note'] if r.get('note') else ''} |")
    return "\n".join(lines) + "\n"
