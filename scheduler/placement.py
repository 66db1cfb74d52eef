"""Placement (after Collage, MLSys'23): which backend runs each node. Every enabled backend offers its options per
node (an rKernel backend: its fastest candidate alone on the vDevice; the library: its call), and, when launch
segments are enabled, LAUNCH: the node's fastest legacy kernel launched at its own occupancy outside the rPrograms
(a CUDA Graph node), priced by the profiler and the backend costs. The first level is a dynamic program over the
operator order with three states (an rProgram is open, a launch segment is open, or the last step was a library
call): leaving an open rProgram (for a call or a launch) pays the overlap that cut loses (measured on the
all-rKernel plan: how long nodes before it still run after nodes beyond it have started), the next rKernel node pays
for opening a new one (a persistent launch), the first node of a launch segment for launching its graph. It is
optimal for chains under those prices (a test checks it against brute force). The second level is a bounded local
search that prices whole plans with the policy itself: it starts from the best of the DP's, the rKernel-only, the
library-wherever-possible and the launch-wherever-possible placements and moves classes of alike nodes, then single
nodes, while that helps, within a budget of scheduled steps (SEARCH_STEPS rTasks and barrier-rTasks summed over
the plans it prices, at least 4 plans), so the same model always gets the same plan whatever the machine's speed."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from .plan import Plan, program_ops
from .policies.common import candidate_us
from .profiler import Profiler
from .segments import CALL_BACKENDS, LAUNCH, Placement, fastest_alone
from .workload import OpSpec, Workload

PLACEMENTS = ("dp", "search", "rtask-only", "launch-only", "library-launch")
# DP states: an rProgram is open / the last step was a library call (or nothing ran yet) / a launch segment is open
OPEN, CLOSED, LAUNCHING = 0, 1, 2
STATE_OF = {"rkernel": OPEN, "call": CLOSED, "launch": LAUNCHING}


@dataclass(frozen=True)
class Option:
    """One way to run one node: a backend and its standalone price (µs)."""

    backend: str
    us: float

    @property
    def is_call(self) -> bool:
        return self.backend in CALL_BACKENDS

    @property
    def kind(self) -> str:
        """The segment it runs in: "rkernel", "launch" or "call"."""
        return "call" if self.is_call else "launch" if self.backend == LAUNCH else "rkernel"


def node_options(spec: OpSpec, profiler: Profiler, veus: int, call_us: Callable, launches: bool = False
                 ) -> list[Option]:
    """Per backend that can run the node: rKernel backends at their fastest candidate on the whole vDevice (plus the
    barrier before it), the library at its call's price, and (`launches`) LAUNCH at its fastest legacy kernel's
    graph node (launch_option_us)."""
    out = []
    barrier = profiler.device.barrier_us
    assert barrier is not None  # the profiler fixes it at its vEU count
    for backend in dict.fromkeys(c.backend for c in spec.candidates):
        best = min(candidate_us(profiler, c, veus) for c in spec.candidates if c.backend == backend)
        out.append(Option(backend, best + barrier))
    out += [Option(c.backend, call_us(c)) for c in spec.calls]
    if launches and spec.candidates:
        out.append(Option(LAUNCH, launch_option_us(spec, profiler)))
    return out


def launch_option_us(spec: OpSpec, profiler: Profiler) -> float:
    """A node launched outside the rPrograms: its fastest legacy variant's launches at their own occupancy, each a
    node of a one-stream segment's graph (the kernel and the node's gap, a PDL launch's where the device has PDL:
    Profiler.chain_launch; never less than a tiny op's node)."""
    from kernel_corpus.bindings import as_unpinned
    cand = fastest_alone(profiler, spec)
    return sum(profiler.launch_node_us(profiler.legacy_kernel_us(as_unpinned(launch)), profiler.chain_launch)
               for launch in cand.launches)


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


def dp(workload: Workload, options: list[list[Option]], open_us: float, lost: list[float] | None = None,
       graph_us: float = 0.0) -> Placement:
    """Collage's first level: least total price over the operator order. Leaving an open rProgram for a library
    call or a launch at node i pays `lost[i]`, the overlap the cut takes from the nodes around it; the next rKernel
    node pays `open_us` to open a new rProgram (so does the first), the first node of a launch segment `graph_us`
    (its graph's launch). Ties keep nodes inside rPrograms."""
    lost = lost or [0.0] * len(options)
    INF = float("inf")
    cost = [INF, 0.0, INF]  # before the first node nothing is open
    back: list[list[tuple[int, Option]]] = []
    for i, opts in enumerate(options):
        new, how = [INF, INF, INF], [(-1, opts[0])] * 3
        for state in (OPEN, CLOSED, LAUNCHING):
            if cost[state] == INF:
                continue
            for opt in opts:
                nxt = STATE_OF[opt.kind]
                price = cost[state] + opt.us
                price += open_us if nxt == OPEN and state != OPEN else 0.0
                price += graph_us if nxt == LAUNCHING and state != LAUNCHING else 0.0
                price += lost[i] if nxt != OPEN and state == OPEN else 0.0
                if price < new[nxt] - 1e-9:
                    new[nxt], how[nxt] = price, (state, opt)
        back.append(how)
        cost = new
    state = min((OPEN, CLOSED, LAUNCHING), key=lambda s: (cost[s], s))
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
    split = (f"; a library call or a launch closes the rProgram: reopening costs {open_us:.1f} us"
             + (f", the cut loses {lost:.1f} us of overlap" if lost > 0 else ""))
    return f"dp: {opt.backend} {opt.us:.1f} us vs {others}{split if any(o.kind != 'rkernel' for o in opts) else ''}"


def fixed(workload: Workload, options: list[list[Option]], prefer: str, label: str) -> Placement:
    """Every node on the option kind `prefer` ("rkernel": its fastest rKernel backend, "call": the library, "launch")
    wherever it has one, else on its rKernel, else on what it has (the cheapest of the kind)."""
    placement = Placement({}, {}, [])
    for i, opts in enumerate(options):
        kernels = [o for o in opts if o.kind == "rkernel"]
        wanted = [o for o in opts if o.kind == prefer]
        pick = min(wanted or kernels or opts, key=lambda o: o.us)
        placement.backend[i] = pick.backend
        placement.why[i] = f"{label}: {pick.backend}" + ("" if wanted or prefer == "rkernel" else
                                                         f" (no {prefer} option)")
    return placement


def cheapest_of(options: list[list[Option]], kinds: tuple[str, ...], label: str) -> Placement:
    """Every node on its cheapest option among `kinds` (a library call only where it is faster than the node's
    launch, as the library-graph baseline takes it: scheduler.baselines.kernels_of), else on what it has."""
    placement = Placement({}, {}, [])
    for i, opts in enumerate(options):
        pick = min([o for o in opts if o.kind in kinds] or opts, key=lambda o: o.us)
        placement.backend[i] = pick.backend
        placement.why[i] = f"{label}: {pick.backend}"
    return placement


def forced(options: list[list[Option]], workload: Workload, force: dict[str, str]) -> list[list[Option]]:
    """Each node's options limited to the kind a --force pattern gives it ("rtask"/"rkernel", "launch", "library"/
    "call"; fnmatch patterns over node names, the first that matches); a one-line error where it has none."""
    from fnmatch import fnmatchcase

    from .graph import SchedulerError
    alias = {"rtask": "rkernel", "library": "call"}
    out = []
    for spec, opts in zip(workload.ops, options):
        kind = next((alias.get(k, k) for pat, k in force.items() if fnmatchcase(spec.name, pat)), None)
        if kind is None:
            out.append(opts)
            continue
        keep = [o for o in opts if o.kind == kind]
        if not keep:
            raise SchedulerError(f"--force: node '{spec.name}' cannot run as {kind} (it can: "
                                 f"{', '.join(sorted({o.kind for o in opts}))})")
        out.append(keep)
    return out


# Scheduled steps (rTasks and barrier-rTasks appended) the local search may spend on pricing plans: pricing is
# linear in them (the wavefront policy prices ~60k per second here; lstm-tc's plan has ~51k, so 4 plans), and a
# step count, unlike seconds, gives the same plan on every machine. Moves kept so far on the zoo: none (build notes).
SEARCH_STEPS = 200_000
STEPS_PER_PLAN = 4_000  # what a plan of launches and calls costs to price, in those steps (its DP and simulation)
MIN_EVALS = 4


def plan_steps_count(plan: Plan) -> int:
    """rTasks in a plan's rPrograms, twice (each may come with a barrier-rTask): what pricing it again costs, read
    without writing its programs."""
    return 2 * sum(plan.ops[i].rtasks for ops in program_ops(plan.programs) for i in ops)


def search(workload: Workload, options: list[list[Option]], start: list[Placement],
           evaluate: Callable[[Placement], Plan], max_evals: int = 60) -> tuple[Placement, Plan]:
    """Collage's second level, bounded: the best distinct starting placement by whole-plan time, then moves while one
    lowers the plan's predicted time, until none helps or the budget is spent: SEARCH_STEPS scheduled steps over
    the plans priced so far (each counted at least STEPS_PER_PLAN), at least MIN_EVALS plans and at most
    `max_evals`. A move puts one class of nodes (same op and same option prices: e.g. every step of an LSTM layer)
    on another backend, then single nodes. The first start is always priced."""
    t0 = time.perf_counter()
    seen: set[tuple] = set()
    starts = []
    for p in start:
        key = tuple(sorted(p.backend.items()))
        if key not in seen:
            seen.add(key)
            starts.append(p)
    evals, spent = 0, 0

    def price(p: Placement) -> Plan:
        nonlocal evals, spent
        plan = evaluate(p)
        evals, spent = evals + 1, spent + max(STEPS_PER_PLAN, plan_steps_count(plan))
        return plan

    def within() -> bool:
        return evals < max_evals and (evals < MIN_EVALS or spent < SEARCH_STEPS)

    best, best_plan = starts[0], price(starts[0])
    for p in starts[1:]:
        if not within():
            break
        plan = price(p)
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
            plan = price(trial)
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
