"""The strongest ways a user could launch the same model without rammer, priced by the cost model, independent of
any plan: they see neither the vEU count nor the variants a policy chose.

Every baseline runs each node's fastest legacy variant at its own occupancy (the candidate whose launches, alone on
the device at ptxas' registers, take least), on the model's graph without the weight-stationary pass (its packed
cells exist for the persistent runtime; the streaming cells are what a launch runs). They differ in how the kernels
are launched (scheduler/dispatch_costs.LaunchCosts):

  op-by-op            one eager launch per kernel, in operator order
  cuda-graph          the same kernels as one CUDA Graph, one stream
  cuda-graph-pdl      that graph with programmatic dependent launch between consecutive kernels
  multi-stream-graph  a graph whose independent branches run concurrently on the executor's 8 streams (assigned as it
                      assigns them), a node after a predecessor on another stream paying the event edge: the longer
                      of that schedule and the device time its kernels occupy (each kernel the share of the SMs its
                      blocks fill)
  library-graph       cuBLAS/cuDNN for Conv/MatMul/Gemm where the library can run them (scheduler.backends.library),
                      the fastest corpus kernel for the rest, one CUDA Graph
  pytorch             the library graph's kernels launched eagerly by PyTorch (its per-op host overhead)

torch.compile is not priced: what Inductor fuses cannot be known without running it (`rammer bench` measures it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


from kernel_corpus.bindings import as_unpinned

from .profiler import Profiler
from .workload import Candidate, OpSpec, Workload

NAMES = ("op-by-op", "cuda-graph", "cuda-graph-pdl", "multi-stream-graph", "library-graph", "pytorch")
LAUNCH_KIND = {"op-by-op": "eager", "cuda-graph": "graph", "cuda-graph-pdl": "pdl", "multi-stream-graph": "graph",
               "library-graph": "graph", "pytorch": "torch"}
BASELINE_DISABLED = ("resident_weights",)  # the passes a launched model does without


@dataclass
class NodeKernels:
    """One node as the baselines launch it: its fastest legacy variant's kernels, or its library call's."""

    name: str
    preds: list[int]
    variant: str                      # the fastest legacy variant ("" when only a library call runs it)
    kernels_us: list[float]           # that variant's launches, each alone on the device
    shares: list[float]               # the share of the device each launch's blocks fill (multi-stream packing)
    library: str = ""                 # the library function that can run it ("" when none)
    library_us: float | None = None   # that call's kernel time


@dataclass
class Baselines:
    """Every priced baseline of one model (µs), the strongest, and the variant each node used; none, with the
    reason, when the model has a node no GPU kernel or library call runs (a CPU build's onnxruntime fallback)."""

    us: dict[str, float]
    variants: dict[str, str] = field(default_factory=dict)
    unavailable: str = ""

    @property
    def strongest(self) -> str | None:
        """The fastest baseline's name (None: none priced)."""
        return min(self.us, key=self.us.__getitem__) if self.us else None

    def ratio(self, predicted_us: float) -> float | None:
        """How many times faster `predicted_us` is than the strongest baseline (> 1: faster; None: none priced)."""
        return None if self.strongest is None else self.us[self.strongest] / max(predicted_us, 1e-9)

    def summary(self, predicted_us: float) -> dict:
        """The stats a build and `rammer plan --json` report: the strongest baseline, the plan's ratio against it,
        and why there is none when there is none."""
        ratio = self.ratio(predicted_us)
        return {"strongest_baseline": self.strongest, "vs_strongest": None if ratio is None else round(ratio, 4)} \
            | ({"baselines_unavailable": self.unavailable} if self.unavailable else {})

    def to_json(self) -> dict:
        """{"us": {...}, "strongest": name, "variants": {node: variant}, "unavailable": reason}."""
        return {"us": {k: round(v, 3) for k, v in self.us.items()}, "strongest": self.strongest,
                "variants": self.variants} | ({"unavailable": self.unavailable} if self.unavailable else {})


def launch_share(profiler: Profiler, launch: Any) -> float:
    """The share of the device a legacy launch's blocks occupy while it runs (1: it fills every SM)."""
    from vdevice.occupancy import blocks_per_sm
    d = profiler.device
    regs = profiler.legacy_registers(launch) if profiler.legacy_registers is not None else None
    smem = int(launch.dynamic_smem) + int(getattr(launch, "static_smem", 0) or 0)
    fit = max(1, blocks_per_sm(launch.threads, regs or d.legacy_registers, smem, d.hw).blocks)
    return min(1.0, max(1, launch.rtasks) / (d.sms * fit))


def candidate_alone_us(profiler: Profiler, cand: Candidate) -> float:
    """A candidate's launches one after another, each alone on the device (resident readers unpinned)."""
    return sum(profiler.legacy_kernel_us(as_unpinned(launch)) for launch in cand.launches)


def node_kernels(workload: Workload, profiler: Profiler) -> list[NodeKernels]:
    """Each node's fastest legacy variant (and its library call's kernel when the library can run it)."""
    from .backends.library import call_kernel_us
    registers = profiler.legacy_registers
    if registers is not None and hasattr(registers, "prefetch"):
        registers.prefetch(as_unpinned(launch) for spec in workload.ops for c in spec.candidates
                           for launch in c.launches)
    out = []
    for spec in workload.ops:
        node = NodeKernels(spec.name, sorted(set(spec.preds)), "", [], [])
        if spec.candidates:
            best = min(spec.candidates, key=lambda c: candidate_alone_us(profiler, c))
            node.variant = best.variant
            node.kernels_us = [profiler.legacy_kernel_us(as_unpinned(launch)) for launch in best.launches]
            node.shares = [launch_share(profiler, as_unpinned(launch)) for launch in best.launches]
        call = library_call_of(spec)
        if call is not None:
            node.library, node.library_us = call.function, call_kernel_us(call, profiler.device)
        out.append(node)
    return out


def library_call_of(spec: OpSpec) -> Any:
    """The node's vendor call, if the library backend offered one."""
    return next((c for c in spec.calls if c.backend == "library"), None)


def kernels_of(node: NodeKernels, library: bool) -> list[float]:
    """The kernels a baseline launches for one node: the library call where allowed and faster (or the only way),
    else the fastest legacy variant."""
    if node.library_us is not None and (not node.kernels_us or (library and node.library_us < sum(node.kernels_us))):
        return [node.library_us]
    return node.kernels_us


def node_streams(nodes: list[NodeKernels], streams: int | None = None) -> list[int]:
    """The stream each node's kernels go on when the executor captures them (vdevice.executors.stream_of_each: a
    chain stays on its stream, a new branch takes an unused stream, then the least recently used of its 8)."""
    from vdevice.executors import MAX_SEGMENT_STREAMS, LaunchStep, stream_of_each
    deps = tuple((p, i) for i, node in enumerate(nodes) for p in node.preds)
    return stream_of_each(LaunchStep(tuple(range(len(nodes))), deps), streams or MAX_SEGMENT_STREAMS)


def multi_stream_us(nodes: list[NodeKernels], profiler: Profiler, streams: int | None = None) -> float:
    """Independent branches on parallel streams of one graph (at most the executor's 8, assigned as it assigns
    them): each node starts when its stream is free and its predecessors have ended, plus the event wait's cost
    when a predecessor is on another stream (LaunchCosts.cross_stream_us, paid even when the event has fired), then
    runs its kernels each with the graph node's gap; no faster than the device time its kernels fill (kernel x
    share, summed)."""
    edge = profiler.launches.cross_stream_us
    lanes = node_streams(nodes, streams)
    finish: list[float] = []
    free: dict[int, float] = {}
    area = 0.0
    for node, lane in zip(nodes, lanes):
        start = max([free.get(lane, 0.0)] + [finish[p] for p in node.preds])
        start += edge if any(lanes[p] != lane for p in node.preds) else 0.0
        kernels = kernels_of(node, library=False)
        shares = node.shares if kernels is node.kernels_us else [1.0] * len(kernels)
        finish.append(start + sum(profiler.launch_node_us(k, "graph") for k in kernels))
        free[lane] = finish[-1]
        area += sum(k * s for k, s in zip(kernels, shares))
    return max(max(finish, default=0.0), area) + profiler.launches.eager_us


def price(workload: Workload, profiler: Profiler) -> Baselines:
    """Every baseline of the workload's nodes (priced at their own occupancy: no vEUs, no plan)."""
    nodes = node_kernels(workload, profiler)
    serial = [k for node in nodes for k in kernels_of(node, library=False)]
    with_library = [k for node in nodes for k in kernels_of(node, library=True)]
    us = {"op-by-op": profiler.launched_us(serial, "eager"), "cuda-graph": profiler.launched_us(serial, "graph"),
          "cuda-graph-pdl": profiler.launched_us(serial, "pdl"), "multi-stream-graph": multi_stream_us(nodes, profiler),
          "library-graph": profiler.launched_us(with_library, "graph"),
          "pytorch": profiler.launched_us(with_library, "torch")}
    if not profiler.device.pdl:  # griddepcontrol needs sm_90: no PDL graph to run on this device
        del us["cuda-graph-pdl"]
    variants = {n.name: (n.library if kernels_of(n, True) == [n.library_us] and n.library else n.variant)
                for n in nodes}
    return Baselines(us, variants)
