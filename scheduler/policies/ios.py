"""IOS (Ding et al., MLSys'21) on the vDevice: a dynamic program over endings of the remaining operator set
splits the DFG into stages; a stage's independent groups run on disjoint vEU ranges, stages end in barriers.
Pruning: at most r operators per group and s groups per stage. The DP is exponential: past `max_endings` it is
solved again over windows of consecutive operators (optimal within each window only), and the plan says so. The
whole search is bounded by `max_states` (ending-search steps plus DP states, summed over every window and
attempt): past it the operators not yet planned are grouped greedily, and the plan says that too. A result that
is not the full DP's is replaced by greedy grouping of the whole DFG where that is faster (noted as well)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..graph import SchedulerError
from ..mechanism import Mechanism
from ..plan import Choice, MakeOp, Plan, default_vdevice_op
from ..profiler import Profiler
from ..workload import Candidate, Workload
from .common import candidate_us, candidate_work, fastest, waves

NAME = "ios"


DEFAULT_MAX_STATES = 400_000  # search steps + DP states for one plan: a few seconds of search on any zoo model


class BudgetExceeded(Exception):
    """The DP enumerated more endings than allowed for this window."""


class SearchCapHit(Exception):
    """The whole plan's search effort passed `max_states`."""


@dataclass
class Effort:
    """Search effort of one plan (ending-search steps + DP states), against the cap `cap`."""

    cap: int
    used: int = 0

    def left(self) -> int:
        return max(0, self.cap - self.used)

    def spend(self, k: int = 1) -> None:
        self.used += k
        if self.used > self.cap:
            raise SearchCapHit


@dataclass
class StageModel:
    """Stage latencies from the profiler: groups on vEU ranges sized by their work, ops of a group in order."""

    workload: Workload
    profiler: Profiler
    picks: dict[int, Candidate]
    veus: int
    memo: dict[tuple, float] = field(default_factory=dict)

    def split(self, groups: list[list[int]]) -> list[range]:
        """Contiguous vEU ranges, one per group, proportional to the groups' work (at least one vEU each)."""
        work = [sum(candidate_work(self.profiler, self.picks[i]) for i in g) for g in groups]
        total = sum(work) or 1.0
        sizes = [max(1, int(self.veus * w / total)) for w in work]
        while sum(sizes) > self.veus:
            sizes[sizes.index(max(sizes))] -= 1
        k = 0
        while sum(sizes) < self.veus:  # hand the rounding leftovers to the heaviest groups first
            sizes[sorted(range(len(groups)), key=lambda j: -work[j])[k % len(groups)]] += 1
            k += 1
        ranges, start = [], 0
        for n in sizes:
            ranges.append(range(start, start + n))
            start += n
        return ranges

    def latency(self, groups: list[list[int]]) -> float:
        """Slowest group: its ops one after another on its range, a barrier between them and at the stage end."""
        key = tuple(tuple(g) for g in groups)
        if key not in self.memo:
            barrier = self.profiler.device.barrier_us
            times = [sum(candidate_us(self.profiler, self.picks[i], len(r)) for i in g) + barrier * (len(g) - 1)
                     for g, r in zip(groups, self.split(groups))]
            self.memo[key] = max(times) + barrier
        return self.memo[key]


def components(ops: list[int], succ: list[list[int]]) -> list[list[int]]:
    """Weakly connected components of the ops (edges inside the set), each sorted, ordered by first op."""
    inside = set(ops)
    parent = {i: i for i in ops}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in ops:
        for j in succ[i]:
            if j in inside:
                parent[find(i)] = find(j)
    groups: dict[int, list[int]] = {}
    for i in sorted(ops):
        groups.setdefault(find(i), []).append(i)
    return sorted(groups.values())


def bits(mask: int) -> list[int]:
    """Positions of the set bits, ascending."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


@dataclass
class EndingSearch:
    """Endings of a set S (bitmask over the window's ops): subsets closed under successors within S, pruned
    to <= s groups of <= r ops; `limit` bounds the search steps of one enumeration (BudgetExceeded past it), and
    the steps are charged to `effort` when given (SearchCapHit once the plan's cap is passed)."""

    succ: list[int]  # successor bitmask per window position
    r: int
    s: int
    limit: int = 200_000
    effort: Effort | None = None

    def endings(self, S: int) -> list[tuple[int, tuple[int, ...]]]:
        """Every pruned non-empty ending with its groups, as (ending mask, group masks)."""
        order = self.near_sinks(S)
        found: list[tuple[int, tuple[int, ...]]] = []
        steps = 0
        capped = self.effort is not None and self.effort.left() < self.limit
        limit = self.effort.left() if capped else self.limit

        def rec(pos: int, chosen: int, groups: tuple[int, ...]) -> None:
            nonlocal steps
            steps += 1
            if steps > limit:
                if capped:
                    self.effort.spend(steps)  # raises SearchCapHit
                raise BudgetExceeded
            if pos == len(order):
                if chosen and len(groups) <= self.s:
                    found.append((chosen, groups))
                return
            rec(pos + 1, chosen, groups)
            i = order[pos]
            below = self.succ[i] & S
            if below & ~chosen:
                return  # a successor in S is not in the ending: i cannot be
            merged, rest = 1 << i, []
            for g in groups:
                if g & below:
                    merged |= g
                else:
                    rest.append(g)
            if merged.bit_count() <= self.r:  # groups only grow: an oversized one is final
                rec(pos + 1, chosen | (1 << i), tuple(rest) + (merged,))

        try:
            rec(0, 0, ())
        except BudgetExceeded:
            if self.effort is not None:
                self.effort.spend(steps)
            raise
        if self.effort is not None:
            self.effort.spend(steps)
        return found

    def near_sinks(self, S: int) -> list[int]:
        """Ops of S with fewer than r descendants in S, successors first: an op of an ending shares a group
        with all its descendants in S, so no other op can be in any pruned ending."""
        below: dict[int, int] = {}
        out = []
        for i in reversed(bits(S)):
            acc = 0
            for j in bits(self.succ[i] & S):
                if j not in below:
                    acc = -1
                    break
                acc |= below[j] | (1 << j)
            if acc >= 0 and acc.bit_count() < self.r:
                below[i] = acc
                out.append(i)
        return out


def solve_window(ops: list[int], search: EndingSearch, model: StageModel, budget: int) -> list[list[int]]:
    """Optimal stages for one window (DP over remaining sets); BudgetExceeded past `budget` endings; each DP state
    is charged to the search's effort (SearchCapHit past the plan's cap)."""
    lat: dict[int, float] = {}

    def latency(ending: int, groups: tuple[int, ...]) -> float:
        if ending not in lat:
            lat[ending] = model.latency(sorted([ops[b] for b in bits(g)] for g in groups))
        return lat[ending]

    full = (1 << len(ops)) - 1
    memo: dict[int, tuple[float, int]] = {0: (0.0, 0)}
    options: dict[int, list[tuple[int, tuple[int, ...]]]] = {}
    stack = [full]
    work = 0  # endings enumerated: the DP's cost
    while stack:  # iterative post-order: a set is solved once every remainder it needs is solved
        S = stack[-1]
        if S in memo:
            stack.pop()
            continue
        if S not in options:
            if search.effort is not None:
                search.effort.spend()
            options[S] = search.endings(S)
            work += len(options[S])
            if work > budget:
                raise BudgetExceeded
        todo = [S & ~e for e, _ in options[S] if S & ~e not in memo]
        if todo:
            stack.extend(todo)
            continue
        memo[S] = min((memo[S & ~e][0] + latency(e, groups), e) for e, groups in options.pop(S))
        stack.pop()
    stages, S = [], full
    while S:
        ending = memo[S][1]
        stages.append([ops[b] for b in bits(ending)])
        S &= ~ending
    return stages[::-1]


def stages_us(stages: list[list[int]], model: StageModel, succ: list[list[int]]) -> float:
    """Sum of the stage latencies (groups = the stage's weakly connected components, as plan() runs them)."""
    return sum(model.latency(components(st, succ)) for st in stages)


def greedy(ops: list[int], workload: Workload, r: int, s: int, model: StageModel) -> list[list[int]]:
    """Greedy stages for ops (a set closed under predecessors once earlier stages ran, any order): each stage takes
    up to s ready operators, critical path first, each kept only if the stage does not get slower than running
    it alone afterwards, and grows each group by a successor whose remaining predecessors are all in that group
    (up to r ops) on the same condition. Groups stay independent, so they are the stage's components."""
    succ = workload.successors()
    inside = set(ops)
    alone = {i: model.latency([[i]]) for i in ops}
    height: dict[int, float] = {}
    for i in sorted(ops, reverse=True):  # indices are topological: successors first
        height[i] = alone[i] + max((height[j] for j in succ[i] if j in inside), default=0.0)
    waiting = {i: sum(1 for p in workload.ops[i].preds if p in inside) for i in ops}
    ready = {i for i in ops if waiting[i] == 0}

    def lat(groups: list[list[int]]) -> float:
        return model.latency(sorted(sorted(g) for g in groups)) if groups else 0.0

    stages: list[list[int]] = []
    while ready:
        groups: list[list[int]] = []
        cost = 0.0
        for i in sorted(ready, key=lambda i: (-height[i], i)):
            if len(groups) == s:
                break
            trial = lat(groups + [[i]])
            if not groups or trial <= cost + alone[i]:
                groups, cost = groups + [[i]], trial
        grown = True
        while grown:  # chains: a successor that only waits on this group joins it when that does not hurt
            grown = False
            for k, g in enumerate(groups):
                if len(g) >= r:
                    continue
                members = set(g)
                for j in sorted({j for i in g for j in succ[i] if j in inside and j not in members}):
                    if all(p in members for p in workload.ops[j].preds if p in inside):
                        trial = lat(groups[:k] + [g + [j]] + groups[k + 1:])
                        if trial <= cost + alone[j]:
                            groups[k], cost, grown = g + [j], trial, True
                            break
        stage = sorted(i for g in groups for i in g)
        stages.append(stage)
        for i in stage:
            inside.discard(i)
            ready.discard(i)
        for i in stage:
            for j in succ[i]:
                if j in inside:
                    waiting[j] -= 1
                    if waiting[j] == 0:
                        ready.add(j)
    if inside:
        raise AssertionError(f"IOS greedy: {len(inside)} operator(s) never became ready")
    return stages


def solve(workload: Workload, r: int, s: int, model: StageModel, max_endings: int,
          notes: list[str], max_states: int = DEFAULT_MAX_STATES) -> list[list[int]]:
    """The whole DFG in one DP when it fits the budget, else in windows of consecutive ops in wave order (so a
    window keeps ops that can run side by side, e.g. the diagonal of stacked LSTM steps), halving the window
    each time one exceeds its share of the budget (windows already solved are kept). The search effort of the
    whole call is capped by `max_states`: past it, the operators not yet planned are grouped greedily. When the
    result is not the full DP's, greedy grouping of the whole DFG replaces it if that is faster."""
    order = [i for wave in waves(workload) for i in wave]
    succ = workload.successors()
    n = len(order)
    effort = Effort(max_states)
    window, smallest = n, n
    stages: list[list[int]] = []
    start = 0
    capped_at = None
    while start < n:
        ops = order[start:start + window]
        pos = {op: k for k, op in enumerate(ops)}
        local = [sum(1 << pos[j] for j in succ[i] if j in pos) for i in ops]
        share = max(1, max_endings * len(ops) // n)  # the budget is for the whole DFG
        try:
            found = solve_window(ops, EndingSearch(local, r, s, effort=effort), model, share)
        except BudgetExceeded:
            window = max(1, window // 2)
            smallest = min(smallest, window)
            continue
        except SearchCapHit:
            capped_at = start
            break
        stages += found
        start += len(ops)
    if smallest < n:
        notes.append(f"IOS: the DP over {n} operators exceeded {max_endings} endings; solved over windows of "
                     f"{smallest} consecutive operators in wave order: optimal within each window only")
    if capped_at is not None:
        rest = order[capped_at:]
        stages += greedy(rest, workload, r, s, model)
        notes.append(f"IOS: search cap hit: {effort.used} of max_states={max_states} search steps and states "
                     f"spent after planning {capped_at} of {n} operators; the remaining {len(rest)} grouped "
                     f"greedily (not optimal; raise max_states to search further)")
    if smallest < n or capped_at is not None:  # not optimal: greedy over the whole DFG may do better
        other = greedy(order, workload, r, s, model)
        mine, theirs = stages_us(stages, model, succ), stages_us(other, model, succ)
        if theirs < mine:
            notes.append(f"IOS: greedy grouping of the whole DFG is faster ({theirs:.1f} us of stages vs "
                         f"{mine:.1f} us): used instead")
            stages = other
    return stages


def plan(workload: Workload, profiler: Profiler, veus: int | None = None, r: int = 3, s: int = 8,
         max_endings: int = 20_000, max_states: int = DEFAULT_MAX_STATES,
         make_op: MakeOp = default_vdevice_op) -> Plan:
    """Stages from the DP (bounded by max_endings per attempt and max_states in all, see solve); each stage's
    groups on disjoint vEU ranges, a barrier before each stage."""
    if max_states < 1:
        raise SchedulerError(f"IOS: max_states must be >= 1, got {max_states}")
    mech = Mechanism(profiler, veus)
    s = min(s, mech.veus)  # a group needs at least one vEU
    picks = {op.index: fastest(profiler, op, mech.veus) for op in workload.ops}
    succ = workload.successors()
    model = StageModel(workload, profiler, picks, mech.veus)
    notes: list[str] = []
    stages = solve(workload, r, s, model, max_endings, notes, max_states)
    b = mech.fork()
    choices: dict[str, Choice] = {}
    previous: list[int] = []
    for k, stage in enumerate(stages):
        barrier = b.barrier_after(previous)
        groups = components(stage, succ)
        for group, lanes in zip(groups, model.split(groups)):
            for i in group:
                spec = workload.ops[i]
                b.schedule_node(spec, picks[i], extra=barrier, veus=lanes)
                choices[spec.name] = Choice(picks[i].variant, f"fastest of {len(spec.candidates)}; stage {k}, "
                                            f"group of {len(group)} on vEUs {lanes.start}-{lanes.stop - 1}")
        previous = stage
    mech.commit(b)
    notes.append(f"IOS: {len(stages)} stage(s), r={r}, s={s}")
    return mech.finish(NAME, choices, notes, make_op)
