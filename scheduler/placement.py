"""Placement (after Collage, MLSys'23): which backend runs each node. Every enabled backend offers its options per
node (an rKernel backend: its fastest candidate alone on the vDevice; the library: its call), priced by the
profiler and the backend costs. The first level is a dynamic program over the operator order with two states (an
rProgram is open, or the last step was a library call): a library call closes the open rProgram, paying the
overlap that cut loses (measured on the all-rKernel plan: how long nodes before it still run after nodes beyond it
have started), and the next rKernel node pays for opening a new one (a persistent launch). It is optimal for chains
under those prices (a test checks it against brute force). The second level is a bounded local search that prices
whole plans with the policy itself: it starts from the best of the DP's, the rKernel-only and the
library-wherever-possible placements and moves classes of alike nodes, then single nodes, while that helps, within
`max_evals` plans and `max_seconds`."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from .plan import Plan
from .policies.common import candidate_us
from .profiler import Profiler
from .segments import CALL_BACKENDS, Placement
from .workload import OpSpec, Workload

PLACEMENTS = ("dp", "search", "rtask-only")
OPEN, CLOSED = 0, 1  # DP states: an rProgram is open / the last step was a library call (or nothing ran yet)


@dataclass(frozen=True)
class Option:
    """One way to run one node: a backend and its standalone price (µs)."""

    backend: str
    us: float

    @property
    def is_call(self) -> bool:
        return self.backend in CALL_BACKENDS


def node_options(spec: OpSpec, profiler: Profiler, veus: int, call_us: Callable) -> list[Option]:
    """Per backend that can run the node: rKernel backends at their fastest candidate on the whole vDevice (plus the
    barrier before it), the library at its call's price."""
    out = []
    barrier = profiler.device.barrier_us
    assert barrier is not None  # the profiler fixes it at its vEU count
    for backend in dict.fromkeys(c.backend for c in spec.candidates):
        best = min(candidate_us(profiler, c, veus) for c in spec.candidates if c.backend == backend)
        out.append(Option(backend, best + barrier))
    out += [Option(c.backend, call_us(c)) for c in spec.calls]
    return out


def lost_overlap(workload: Workload, plan: Plan | None, barrier_us: float) -> list[float]:
    """Per node i, the overlap a cut at i would lose: in the all-rKernel plan, how long nodes before i (in operator
    order) still run after nodes beyond i have started. Zero everywhere without such a plan."""
    n = len(workload.ops)
    if plan is None:
        return [0.0] * n
    from .report import schedule_slices
    start: dict[str, float] = {}
    end: dict[str, float] = {}
    for sl in schedule_slices(plan, plan.programs, barrier_us):
        if sl.kind == "rtask":
            start[sl.name] = min(start.get(sl.name, sl.start), sl.start)
            end[sl.name] = max(end.get(sl.name, sl.end), sl.end)
    names = [spec.name for spec in workload.ops]
    before = [0.0] * n
    acc = float("-inf")
    for i, name in enumerate(names):
        before[i] = acc
        acc = max(acc, end.get(name, float("-inf")))
    after = [0.0] * n
    acc = float("inf")
    for i in range(n - 1, -1, -1):
        after[i] = acc
        acc = min(acc, start.get(names[i], float("inf")))
    return [max(0.0, before[i] - after[i]) if before[i] > float("-inf") and after[i] < float("inf") else 0.0
            for i in range(n)]


def dp(workload: Workload, options: list[list[Option]], open_us: float, lost: list[float] | None = None
       ) -> Placement:
    """Collage's first level: least total price over the operator order. A library call closes the open rProgram:
    the next rKernel node pays `open_us` to open a new one (so does the first), and a call at node i placed while an
    rProgram is open pays `lost[i]`, the overlap the cut takes from the nodes around it. Ties keep nodes inside
    rPrograms."""
    lost = lost or [0.0] * len(options)
    INF = float("inf")
    cost = [INF, 0.0]  # before the first node nothing is open: the first rKernel node opens an rProgram
    back: list[list[tuple[int, Option]]] = []
    for opts in options:
        new, how = [INF, INF], [(-1, opts[0]), (-1, opts[0])]
        for state in (OPEN, CLOSED):
            if cost[state] == INF:
                continue
            for opt in opts:
                nxt = CLOSED if opt.is_call else OPEN
                price = cost[state] + opt.us + (open_us if nxt == OPEN and state == CLOSED else 0.0)
                price += lost[len(back)] if opt.is_call and state == OPEN else 0.0
                if price < new[nxt] - 1e-9:
                    new[nxt], how[nxt] = price, (state, opt)
        back.append(how)
        cost = new
    state = OPEN if cost[OPEN] <= cost[CLOSED] else CLOSED
    chosen: dict[int, Option] = {}
    for i in range(len(options) - 1, -1, -1):
        prev, opt = back[i][state]
        chosen[i] = opt
        state = prev
    placement = Placement({}, {}, [f"placement dp: predicted {min(cost):.1f} us of steps by the DP's prices"])
    for i, opts in enumerate(options):
        opt = chosen[i]
        placement.backend[i] = opt.backend
        placement.why[i] = why(opt, opts, open_us, lost[i])
    return placement


def why(opt: Option, opts: list[Option], open_us: float, lost: float = 0.0) -> str:
    """The reason of one DP choice: its price against the others'."""
    if len(opts) == 1:
        return f"{opt.backend}: the only backend ({opt.us:.1f} us)"
    others = ", ".join(f"{o.backend} {o.us:.1f} us" for o in opts if o is not opt)
    split = (f"; a library call closes the rProgram: reopening costs {open_us:.1f} us"
             + (f", the cut loses {lost:.1f} us of overlap" if lost > 0 else ""))
    return f"dp: {opt.backend} {opt.us:.1f} us vs {others}{split if any(o.is_call for o in opts) else ''}"


def fixed(workload: Workload, options: list[list[Option]], prefer_call: bool, label: str) -> Placement:
    """Every node on an rKernel backend (its fastest), or on the library wherever the library can run it."""
    placement = Placement({}, {}, [])
    for i, opts in enumerate(options):
        kernels = [o for o in opts if not o.is_call]
        calls = [o for o in opts if o.is_call]
        pick = calls[0] if calls and (prefer_call or not kernels) else min(kernels, key=lambda o: o.us)
        placement.backend[i] = pick.backend
        placement.why[i] = f"{label}: {pick.backend}" + ("" if kernels or not calls else " (no rKernel)")
    return placement


def search(workload: Workload, options: list[list[Option]], start: list[Placement],
           evaluate: Callable[[Placement], Plan], max_evals: int = 60, max_seconds: float = 30.0
           ) -> tuple[Placement, Plan]:
    """Collage's second level, bounded: the best distinct starting placement by whole-plan time, then moves while one
    lowers the plan's predicted time, until none helps or the budget (plans priced, seconds) is spent. A move puts
    one class of nodes (same op and same option prices: e.g. every step of an LSTM layer) on another backend, then
    single nodes. The first start is always priced."""
    t0 = time.perf_counter()
    seen: set[tuple] = set()
    starts = []
    for p in start:
        key = tuple(sorted(p.backend.items()))
        if key not in seen:
            seen.add(key)
            starts.append(p)
    best, best_plan = starts[0], evaluate(starts[0])
    evals = 1
    within = lambda: evals < max_evals and time.perf_counter() - t0 < max_seconds  # noqa: E731
    for p in starts[1:]:
        if not within():
            break
        plan = evaluate(p)
        evals += 1
        if plan.predicted_us < best_plan.predicted_us - 1e-6:
            best, best_plan = p, plan
    moves = 0
    improved = True
    while improved and within():
        improved = False
        for nodes, backend in candidate_moves(options, best):
            if not within():
                break
            trial = Placement(dict(best.backend), dict(best.why), [])
            for i in nodes:
                trial.backend[i] = backend
            plan = evaluate(trial)
            evals += 1
            if plan.predicted_us < best_plan.predicted_us - 1e-6:
                for i in nodes:
                    trial.why[i] = (f"search: {backend} (plan {best_plan.predicted_us:.1f} -> "
                                    f"{plan.predicted_us:.1f} us, {len(nodes)} node(s) moved together)")
                best, best_plan, improved = trial, plan, True
                moves += 1
                break  # moves are recomputed from the new placement
    note = (f"placement search: {evals} plan(s) priced, {moves} move(s) kept, predicted "
            f"{best_plan.predicted_us:.1f} us in {time.perf_counter() - t0:.1f} s"
            + ("" if within() else " (budget spent)"))
    best.notes = [note]
    if moves:
        best_plan = evaluate(best)  # the kept plan again, with every kept move's reason and the note
    else:
        best_plan.notes.insert(0, note)
    return best, best_plan


def candidate_moves(options: list[list[Option]], current: Placement) -> list[tuple[list[int], str]]:
    """(nodes, backend) moves away from `current`: whole classes of alike nodes first, then single nodes."""
    classes: dict[tuple, list[int]] = {}
    for i, opts in enumerate(options):
        if len(opts) > 1:
            classes.setdefault(tuple((o.backend, round(o.us, 3)) for o in opts), []).append(i)
    moves: list[tuple[list[int], str]] = []
    for key, nodes in classes.items():
        for backend, _ in key:
            movers = [i for i in nodes if current.backend[i] != backend]
            if len(movers) > 1:
                moves.append((movers, backend))
    for i, opts in enumerate(options):
        moves += [([i], o.backend) for o in opts if len(opts) > 1 and o.backend != current.backend[i]]
    return moves
