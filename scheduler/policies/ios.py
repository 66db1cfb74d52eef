"""IOS (Ding et al., MLSys'21) on the vDevice: a dynamic program over endings of the remaining operator set
splits the DFG into stages; a stage's independent groups run on disjoint vEU ranges, stages end in barriers.
Pruning: at most r operators per group and s groups per stage. The DP is exponential: past `max_endings` it is
solved again over windows of consecutive operators (optimal within each window only), and the plan says so."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..mechanism import Mechanism
from ..plan import Choice, MakeOp, Plan, default_vdevice_op
from ..profiler import Profiler
from ..workload import Candidate, Workload
from .common import candidate_us, candidate_work, fastest, waves

NAME = "ios"


class BudgetExceeded(Exception):
    """The DP enumerated more endings than allowed for this window."""


@dataclass
class StageModel:
    """Stage latencies from the profiler: groups on vEU ranges sized by their work, ops of a group in order."""

    workload: Workload
    profiler: Profiler
    picks: dict[int, Candidate]
    num_veus: int
    memo: dict[tuple, float] = field(default_factory=dict)

    def split(self, groups: list[list[int]]) -> list[range]:
        """Contiguous vEU ranges, one per group, proportional to the groups' work (at least one vEU each)."""
        work = [sum(candidate_work(self.profiler, self.picks[i]) for i in g) for g in groups]
        total = sum(work) or 1.0
        sizes = [max(1, int(self.num_veus * w / total)) for w in work]
        while sum(sizes) > self.num_veus:
            sizes[sizes.index(max(sizes))] -= 1
        k = 0
        while sum(sizes) < self.num_veus:  # hand the rounding leftovers to the heaviest groups first
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
    to <= s groups of <= r ops; `limit` bounds the search steps of one enumeration (BudgetExceeded past it)."""

    succ: list[int]  # successor bitmask per window position
    r: int
    s: int
    limit: int = 200_000

    def endings(self, S: int) -> list[tuple[int, tuple[int, ...]]]:
        """Every pruned non-empty ending with its groups, as (ending mask, group masks)."""
        order = self.near_sinks(S)
        found: list[tuple[int, tuple[int, ...]]] = []
        steps = 0

        def rec(pos: int, chosen: int, groups: tuple[int, ...]) -> None:
            nonlocal steps
            steps += 1
            if steps > self.limit:
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

        rec(0, 0, ())
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
    """Optimal stages for one window (DP over remaining sets); BudgetExceeded past `budget` endings."""
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


def solve(workload: Workload, r: int, s: int, model: StageModel, max_endings: int,
          notes: list[str]) -> list[list[int]]:
    """The whole DFG in one DP when it fits the budget, else in halving windows of consecutive ops in wave
    order (so a window keeps ops that can run side by side, e.g. the diagonal of stacked LSTM steps); each
    window gets its share of the budget, so one attempt enumerates at most about `max_endings` endings."""
    order = [i for wave in waves(workload) for i in wave]
    succ = workload.successors()
    n = len(order)
    window = n
    while True:
        try:
            stages = []
            for start in range(0, n, window):
                ops = order[start:start + window]
                pos = {op: k for k, op in enumerate(ops)}
                local = [sum(1 << pos[j] for j in succ[i] if j in pos) for i in ops]
                share = max(1, max_endings * len(ops) // n)  # the budget is for the whole DFG
                stages += solve_window(ops, EndingSearch(local, r, s), model, share)
            break
        except BudgetExceeded:
            window = max(1, window // 2)
    if window < n:
        notes.append(f"IOS: the DP over {n} operators exceeded {max_endings} endings; solved over windows of "
                     f"{window} consecutive operators in wave order: optimal within each window only")
    return stages


def plan(workload: Workload, profiler: Profiler, num_veus: int | None = None, r: int = 3, s: int = 8,
         max_endings: int = 20_000, make_op: MakeOp = default_vdevice_op) -> Plan:
    """Stages from the DP; each stage's groups on disjoint vEU ranges, a barrier before each stage."""
    mech = Mechanism(profiler, num_veus)
    s = min(s, mech.num_veus)  # a group needs at least one vEU
    picks = {op.index: fastest(profiler, op, mech.num_veus) for op in workload.ops}
    succ = workload.successors()
    model = StageModel(workload, profiler, picks, mech.num_veus)
    notes: list[str] = []
    stages = solve(workload, r, s, model, max_endings, notes)
    b = mech.fork()
    choices: dict[str, Choice] = {}
    previous: list[int] = []
    for k, stage in enumerate(stages):
        barrier = b.barrier_after(previous)
        groups = components(stage, succ)
        for group, veus in zip(groups, model.split(groups)):
            for i in group:
                spec = workload.ops[i]
                b.schedule_node(spec, picks[i], extra=barrier, veus=veus)
                choices[spec.name] = Choice(picks[i].variant, f"fastest of {len(spec.candidates)}; stage {k}, "
                                            f"group of {len(group)} on vEUs {veus.start}-{veus.stop - 1}")
        previous = stage
    mech.commit(b)
    notes.append(f"IOS: {len(stages)} stage(s), r={r}, s={s}")
    return mech.finish(NAME, choices, notes, make_op)
