"""What the persistent interpreter's SASS and the GPU's launch paths cost, as named figures with their sources.

The terms are read off the sm_90 SASS of the interpreter (docs/vdevice-dispatch-sass.md) and priced by the runtime
micro-benchmark measured on an H100 on 2026-11-27 (`tests/vdevice_gpu_bench.py --quick`,
results/h100-2026-11-27/vdevice_table.md, commit 3f2544c). A figure no measurement backs is marked "estimate".
When the runtime or the legacy kernels change (faster hand-off, several rTasks per vEU), update the figure here and
say where the new number comes from; the simulation (scheduler/simulate.py) and the baselines read only these.

Per rTask on its vEU (`InterpreterCosts`):
  dispatch      the loop head: the next 32-byte record fetched ahead, decode, the switch, one `BAR.SYNC 0x0`;
                argument slots that hit L1 (a vEU running rTasks of the same op back to back);
  arg fetch     the argument slots (`LDG.E.CONSTANT` from argtab) and the first input lines from L2: an rTask of
                another op than the vEU's previous one, or any rTask after a wait (the acquire's `CCTL.IVALL`
                invalidated L1: the L1 invalidation's effect on the next rTask's loads);
  publish       an awaited rTask's release: `MEMBAR.ALL.GPU` drains its stores to L2 before the warp-aggregated
                `REDG.E.ADD.STRONG.GPU` on its group's counter; the vEU cannot dispatch until the fence retires;
  wait          a barrier-rTask: relaxed strong polls of one counter per awaited group, then one acquire fence
                (`MEMBAR.ALL.GPU` + `CCTL.IVALL`) and the vEU barrier. Satisfied when it arrives (every awaited
                rTask already published): one L2 round trip and the fence. Unsatisfied: it sees the counter one
                hand-off after the last awaited rTask ends (publish, visibility at L2, the next poll, the fence).
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

# The runtime micro-benchmark's figures (µs), H100 80GB HBM3, 2026-11-27 (results/h100-2026-11-27/vdevice_table.md)
TINY_RTASK_US = 0.527          # "per tiny rTask, 1 vEU x 2000": independent 32-thread rTasks of one op, no waits
CHAIN_RTASK_US = 0.780         # "same chain on 1 vEU": one-rTask ops, each reading the previous op's output
HANDOFF_US = 1.448             # "hand-off cost": (ping-pong on 2 vEUs - the same chain on 1 vEU) per hand-off
# "step-barrier cost, N vEUs": every vEU awaits the previous round's rTasks of all N vEUs, per barrier; its own is
# covered by program order, so the wait's fan-in is N - 1 (the awaited vEUs' arrivals on one counter)
STEP_BARRIER_US = ((1, HANDOFF_US), (15, 1.411), (131, 1.310), (263, 1.642), (395, 1.858))
GRAPH_NODE_US = 1.258          # "CUDA Graph of those launches": per tiny op of a 1000-op chain replayed as a graph
EAGER_LAUNCH_US = 6.279        # "op-by-op launches": per tiny op launched eagerly through CuPy (RammerBase)
# An L2 round trip as the interpreter sees it: the chain's rTask fetches its argument slots of a new op (and its
# input, the line the previous rTask wrote) from L2, which the tiny independent rTasks find in L1
L2_ROUND_TRIP_US = CHAIN_RTASK_US - TINY_RTASK_US


@dataclass(frozen=True)
class InterpreterCosts:
    """The persistent interpreter's fixed costs per rTask and per barrier-rTask (µs; module docstring)."""

    dispatch_us: float = TINY_RTASK_US
    arg_fetch_us: float = L2_ROUND_TRIP_US
    # estimate: the fence waits for the rTask's stores to be acknowledged by L2, one L2 round trip
    publish_us: float = L2_ROUND_TRIP_US
    # estimate: one strong load of the counter from L2 (an L2 round trip) and the acquire fence with nothing in
    # flight (MEMBAR.ALL.GPU + CCTL.IVALL + BAR.SYNC, estimated at 0.1 µs)
    satisfied_wait_us: float = L2_ROUND_TRIP_US + 0.1
    # measured hand-off by fan-in (publish included): (fan-in, µs), increasing fan-in
    handoff_by_fan_in: tuple[tuple[int, float], ...] = STEP_BARRIER_US
    launch_us: float = EAGER_LAUNCH_US  # one persistent launch per rProgram: an eager launch (measured, tiny op)

    def handoff_us(self, fan_in: int) -> float:
        """An unsatisfied wait on `fan_in` awaited vEUs, from the last awaited end to the next rTask's dispatch,
        less the publish the awaited vEU pays on its own timeline: the measured table, linear between its points
        and beyond its last two."""
        return max(0.0, interpolate(self.handoff_by_fan_in, max(1, fan_in)) - self.publish_us)

    def wait_visible_us(self, fan_in: int) -> float:
        """When an awaited rTask's end is seen by a waiter: its publish plus the hand-off."""
        return self.publish_us + self.handoff_us(fan_in)


@dataclass(frozen=True)
class LaunchCosts:
    """What one kernel launch adds beyond the kernel's own time, per way of launching (µs)."""

    eager_us: float = EAGER_LAUNCH_US        # measured per tiny op (its kernel included), op by op
    graph_node_us: float = GRAPH_NODE_US     # measured per tiny op (its kernel included), CUDA Graph node
    # estimate: a tiny kernel's own time (one small block launched, one dependent L2 round trip, its store); the
    # measured per-op figures include it, the gaps below do not
    tiny_kernel_us: float = 0.6
    # estimate: with programmatic dependent launch the next kernel's blocks are resident before the previous one
    # ends and wait in cudaGridDependencySynchronize; what is left of the gap is the completion signal, priced like
    # the interpreter's satisfied wait (an L2 round trip and a fence)
    pdl_gap_us: float = L2_ROUND_TRIP_US + 0.1
    # estimate: a PyTorch eager op's host overhead (Python, the dispatcher, the allocator) per node; public
    # profiles of small ops put it at 10-20 µs: the low end
    torch_eager_us: float = 10.0
    # Eager launches are asynchronous: the host issues one per eager_us (the tiny-op figure above is the host's
    # interval: its kernel is shorter), and a kernel longer than that runs back to back with the next one on the
    # stream, after this gap. Fitted, results/h100-2026-11-27-0900/results.jsonl (commit 79f1ec3, lstm-tc full size):
    # "op-by-op" 8.943 ms against "cuda-graph" 7.801 ms for the same 1102 kernels; the 100 tiny Concat copies are
    # host-bound (100 x (6.279 - 1.258) = 502 us of the 1142 us difference), the other 640 us over 1000 LSTM cells of
    # ~7 us is 0.64 us per kernel more than a graph node's 0.658 us gap: 1.30 us
    eager_stream_gap_us: float = 1.30
    # A multi-stream graph node whose predecessor is on another stream (a captured event edge): what the node adds
    # beyond its own gap, paid even when the event has fired (its launch cannot be staged behind its stream's previous
    # kernel). Fitted, results/h100-2026-11-27-0900/results.jsonl (commit 79f1ec3, lstm-tc full size):
    # "multi-stream-graph" 3.035 ms. The executor puts its 10 layer chains on 8 streams (vdevice.executors.
    # stream_of_each): layers 7, 8 and 9 share stream 7, so about 300 cells run in a row there (2.29 ms at the
    # single-stream graph's node cost), about 100 of them (layer 7's) after a cell on another stream; 6.95 us each
    # makes scheduler.baselines.multi_stream_us give 3.035 ms. One figure cannot tell this edge from the 8 streams'
    # cells slowing each other while they overlap (about the first 100 steps): either reads the same 0.74 ms
    cross_stream_us: float = 6.95

    def gap_us(self, how: str) -> float:
        """What a launch adds to its kernel ("eager", "graph", "pdl", "torch")."""
        if how == "pdl":
            return self.pdl_gap_us
        per_op = {"eager": self.eager_us, "graph": self.graph_node_us, "torch": self.torch_eager_us}[how]
        return max(0.0, per_op - self.tiny_kernel_us)

    def floor_us(self, how: str) -> float:
        """The least one launched op takes: a tiny kernel and its gap."""
        return self.tiny_kernel_us + self.gap_us(how)


def interpolate(points: tuple[tuple[int, float], ...], x: float) -> float:
    """Piecewise-linear through (x, y) points sorted by x; constant below the first, the last segment's slope
    beyond the last."""
    xs = [p[0] for p in points]
    if len(points) == 1 or x <= xs[0]:
        return points[0][1]
    k = min(max(bisect_right(xs, x), 1), len(points) - 1)
    (x0, y0), (x1, y1) = points[k - 1], points[k]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


INTERPRETER = InterpreterCosts()
LAUNCHES = LaunchCosts()
