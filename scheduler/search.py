"""The target search of a GPU build without --veus: which vEUs per SM the plan runs on, found by planning, fitting
the plan's interpreter to ptxas (vdevice.occupancy) and re-planning, and keeping the plan the cost model predicts
fastest (keep_fastest). Three steps, each over the typed plan record `Planned`:

- occupancy (`fit`): re-plan on the vEUs per SM ptxas allows the plan's interpreter until the count holds;
- the register budget (`register_budget`): the interpreter needs the registers of its most register-hungry rKernel
  instantiation, so one fat candidate can cost every other rTask its co-resident vEUs. When the vEUs per SM stay
  below MOST_VEUS_PER_SM for that reason, the search also plans without the candidates that do not fit a higher
  count's budget;
- resident slices (`resident`): weight-stationary layers fill a vEU's shared memory (docs/ARCHITECTURE.md §7), so the
  search also plans with the slices sized for k vEUs per SM (smaller slices on more vEUs).

The build supplies a `Planner` (what a target's graph is, and a plan with its converted rKernels); import and the
graph passes ran once before, and a target only re-runs the target passes (scheduler.pipeline.specialise). A trial
whose interpreter ptxas holds to no more vEUs per SM than the plan it competes with cannot be kept, so it is not
re-planned at that count (its record says so)."""
from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, TypeVar

from toolchain.cxx import kernel_expr
from vdevice.occupancy import Choice, register_budget
from vdevice.program import Op, Program
from vdevice.target import MOST_VEUS_PER_SM, VEU_HEADER_BYTES, Target

from .graph import Graph
from .pipeline import Scheduled
from .plan import program_ops
from .profiler import Profiler
from .workload import Workload

# A plan without some candidates must be predicted this much faster to be kept: the cost model's per-kernel
# figures are estimates (scheduler/profiler.py), so a smaller gain is no reason to give up a kernel (estimate).
MIN_GAIN = 0.02
BUDGET_ROUNDS = 6  # re-plans per vEU count the register budget may take, each leaving out one more instantiation
# (a re-plan may pick instantiations the last one did not: a convolution's tiles, copy widths and split ones can
# take five or six rounds)

T = TypeVar("T")


# ---- the plan record and what the build supplies -----------------------------------------------------------
@dataclass
class Planned:
    """A plan made for `target` (its vEUs, how many share an SM) from a graph whose resident slices were sized for
    `sized_for`, with its converted rKernels and the occupancy ptxas gave it (None: not checked)."""

    target: Target
    sized_for: Target
    sch: Scheduled
    ops: list[Op]
    texts: dict[str, str]
    profiler: Profiler
    occupancy: Choice | None = None
    setup: list[Op] = field(default_factory=list)  # the plan's setup ops bound to their rKernels (Plan.setup)

    @property
    def veus_per_sm(self) -> int:
        """vEUs sharing an SM in this plan."""
        return self.target.veus_per_sm

    @property
    def predicted_us(self) -> float:
        """The cost model's (or the measured profile's) prediction."""
        return self.sch.plan.predicted_us


class Planner(Protocol):
    """What the search asks of the build: a target's graph and workload, and a plan with its rKernels."""

    def specialise(self, target: Target) -> Graph:
        """The passed graph made for `target` (scheduler.pipeline.specialise)."""
        ...

    def workload(self, graph: Graph, target: Target) -> Workload:
        """What the policies schedule of that graph (scheduler.workload.build_workload)."""
        ...

    def plan(self, graph: Graph, workload: Workload, target: Target, sized_for: Target) -> Planned:
        """The policy's plan of `workload` on `target`, its ops bound to converted rKernels."""
        ...


class Steps(Protocol):
    """The build's progress: one line per named step."""

    quiet: bool

    def step(self, what: str, fn: Callable[[], T], own_line: bool = False) -> T:
        """Run and time one step."""
        ...


@dataclass
class SearchResult:
    """The plan kept, and what the register budget and the resident-slice search decided (None: not searched)."""

    planned: Planned
    budget: "BudgetChoice | None" = None
    resident: "ResidentChoice | None" = None


# ---- the search --------------------------------------------------------------------------------------------
class TargetSearch:
    """Occupancy, then the register budget, then (when the resident pass packed some family and `slices` is set) the
    resident-slice search, each keeping the plan the cost model prefers."""

    def __init__(self, planner: Planner, steps: Steps, most: int = MOST_VEUS_PER_SM) -> None:
        self.planner, self.steps, self.most = planner, steps, most

    def run(self, first: Planned, slices: bool = True) -> SearchResult:
        """The whole search from the first plan (the build's target)."""
        from vdevice.occupancy import cancel_prefetch
        try:
            planned = self.fit(first, self.most)
            budget, planned = self.register_budget(planned)
            if not slices:
                return SearchResult(planned, budget)
            return self.resident(planned, budget)
        finally:
            cancel_prefetch()

    def prefetch(self, p: Planned, needed: bool = False) -> None:
        """Start compiling the plan's instantiations alone (what a register budget asks for) beside the fit and the
        planning: when `needed`, else unless shared memory already rules out one more vEU per SM (no budget then)."""
        from vdevice.occupancy import prefetch_instantiation_usage
        if p.ops:
            threads, smem = veu_footprint(p.sch.plan, p.ops, p.texts)
            if needed or register_budget(threads, smem, p.veus_per_sm + 1):
                prefetch_instantiation_usage(p.ops, p.texts)

    def replan(self, p: Planned, veus_per_sm: int, workload: Workload | None = None) -> Planned:
        """The plan's graph (and `workload`, else its own) planned on `veus_per_sm` vEUs per SM."""
        return self.planner.plan(p.sch.graph, workload or p.sch.workload, p.target.at(veus_per_sm), p.sized_for)

    def fit(self, p: Planned, most: int, floor: int = 0) -> Planned:
        """Re-plan on the vEUs per SM ptxas allows the plan's interpreter until the count holds. A count at or below
        `floor` (the one a trial must beat) is recorded, not planned: such a trial cannot be kept."""
        while p.ops:
            occ = self.steps.step("vEUs per SM from ptxas",
                                  lambda: choose_occupancy(p.ops, p.texts, p.sch.plan, most, floor))
            if occ is None or occ.veus_per_sm == p.veus_per_sm or occ.veus_per_sm <= floor:
                p.occupancy = occ
                return p
            most = occ.veus_per_sm
            p = self.replan(p, most)
            p.occupancy = occ
        return p

    # -- the register budget --
    def register_budget(self, p: Planned) -> tuple["BudgetChoice | None", Planned]:
        """When register-hungry instantiations keep the vEUs per SM below the most, also plan at each higher count
        (fewest first, while the prediction improves) without the candidates of the hungriest instantiations over
        its budget, one more per re-plan until ptxas allows the count, and keep the plan BudgetChoice.decide prefers
        (ptxas' registers per instantiation, cached). Returns (the BudgetChoice or None, the plan kept)."""
        if p.occupancy is None or p.veus_per_sm >= self.most:
            return None, p
        threads, smem = veu_footprint(p.sch.plan, p.ops, p.texts)
        if not register_budget(threads, smem, p.veus_per_sm + 1):
            return None, p  # shared memory rules out the next count whatever the registers: no budget target
        registers = self.steps.step("registers per rKernel instantiation",
                                    lambda: instantiation_registers(p.ops, p.texts))
        targets = budget_targets(registers, threads, smem, p.veus_per_sm, self.most)
        if not targets:
            return None, p
        choice = BudgetChoice(p.veus_per_sm, p.predicted_us)
        plans = search_trials(targets, lambda t: self.budget_trial(p, t), choice.trials, p.predicted_us)
        kept = choice.decide()
        self.say(choice.describe())
        return choice, (plans[kept] if kept >= 0 else p)

    def budget_trial(self, p: Planned, target: "BudgetTarget") -> tuple["BudgetTrial", Planned]:
        """Plan at the target's count without its excluded instantiations, leaving out the next hungriest over its
        budget while ptxas allows fewer (at most BUDGET_ROUNDS re-plans)."""
        trial, q = BudgetTrial(target), p
        for _ in range(BUDGET_ROUNDS):
            reduced = without_candidates(p.sch.workload, trial.target.excluded)
            if reduced is None:
                break
            wl, trial.dropped = reduced
            q = self.replan(p, target.veus_per_sm, wl)
            self.prefetch(q, needed=True)
            q = self.fit(q, target.veus_per_sm, floor=p.veus_per_sm)
            trial.record(q)
            used = instantiation_registers(q.ops, q.texts)
            more = [e for e in over_budget(used, target.registers) if e not in trial.target.excluded]
            if (trial.planned and trial.veus_per_sm >= target.veus_per_sm) or not more:
                break
            trial.target = dataclasses.replace(trial.target,
                                               excluded=(*trial.target.excluded, *hungriest(used, more)))
        return trial, q

    # -- resident slices --
    def resident(self, p: Planned, budget: "BudgetChoice | None") -> SearchResult:
        """When the resident pass packed some family and the plan stays below the most vEUs per SM, also plan with
        the slices sized for each higher count k (smaller slices on more vEUs; families beyond the vEUs stream), fit
        each to ptxas and (when it packs as many families as the first pins) the register budget as the first plan
        was, and keep the plan ResidentChoice.decide prefers."""
        if p.occupancy is None or p.veus_per_sm >= self.most or not packed_families(p.sch.graph):
            return SearchResult(p, budget)
        choice = ResidentChoice([resident_trial(p, budget)])
        budgets = [budget]

        def attempt(k: int) -> tuple[ResidentTrial, Planned]:
            trial, q, b = self.resident_plan(p, k, choice.trials[0])
            budgets.append(b)
            return trial, q or p  # a trial not planned is never kept: the first plan stands in
        # every count is planned: what each gives is the evidence for the choice
        counts = range(p.sized_for.veus_per_sm + 1, self.most + 1)
        plans = [p] + search_trials(counts, attempt, choice.trials, p.predicted_us, stop_when_slower=False)
        kept = choice.decide()
        self.say(choice.describe())
        return SearchResult(plans[kept], budgets[kept], choice)

    def resident_plan(self, p: Planned, k: int, base: "ResidentTrial") -> tuple["ResidentTrial", Planned | None,
                                                                               "BudgetChoice | None"]:
        """The plan with slices sized for k vEUs per SM, fitted to ptxas, its register budget, and its record. A
        target whose pass packs fewer families than the first plan pins cannot be kept (ResidentChoice.decide)
        whatever its plan: it is recorded, not planned (None)."""
        sized = p.sized_for.at(k)
        graph = self.steps.step(f"target passes for slices of {k}/SM", lambda: self.planner.specialise(sized))
        packed = packed_families(graph)
        if packed < base.pinned:
            return ResidentTrial(k, packed, note=f"packs {packed} of the {base.pinned} families the first plan pins: "
                                                 f"not planned"), None, None
        q = self.planner.plan(graph, self.planner.workload(graph, sized), sized, sized)
        self.prefetch(q)
        q = self.fit(q, k)
        b, q = self.register_budget(q)
        return resident_trial(q, b), q, b

    def say(self, line: str) -> None:
        """One line of the build log."""
        if not self.steps.quiet:
            print(f"  {line}", file=sys.stderr)


# ---- ptxas' figures for a plan --------------------------------------------------------------------------------
def packed_families(g: Graph) -> int:
    """How many families the resident_weights pass packed in this graph."""
    return sum(r.changes for r in g.pass_log if r.name == "resident_weights")


def instantiation_registers(ops: list[Op], texts: Mapping[str, str]) -> dict[str, int]:
    """Per kernel expression of the ops, ptxas' registers in an interpreter of its own, unbounded
    (vdevice.occupancy.instantiation_usage, cached)."""
    from vdevice.occupancy import instantiation_usage
    return {e: u.registers for e, u in instantiation_usage(ops, texts).items()}


def veu_footprint(plan: Any, ops: list[Op], texts: Mapping[str, str]) -> tuple[int, int]:
    """A vEU's threads and dynamic shared memory for the plan: as the executor will launch it (veu_shared_bytes)
    when nvcc is there, else the plan's estimate (the launches' dynamic bytes and resident slices, plus the
    header)."""
    from toolchain.nvcc import find_nvcc
    if not plan.veu_needs:  # no rProgram (every node in launch segments or library calls): no vEU to size
        return 0, 0
    threads = max(n.threads for n in plan.veu_needs)
    if find_nvcc() is None or not ops:
        return threads, max(n.smem_bytes for n in plan.veu_needs) + VEU_HEADER_BYTES
    return threads, veu_shared_bytes(ops, texts, program_ops(plan.programs))


def veu_shared_bytes(ops: list[Op], texts: Mapping[str, str], runs: Sequence[Sequence[int]]) -> int:
    """The dynamic shared memory the executor launches the vEUs of programs running `runs` (per program, the ops
    it runs) with: each rTask's dynamic bytes and converted layout (sized by the device compiler:
    vdevice.occupancy.device_layout_sizes; ptxas does not see it), the header and the resident region
    (vdevice.codegen.veu_smem_bytes), the most of any program (nvcc needed)."""
    from vdevice.codegen import generate, program_regions, veu_smem_bytes
    from vdevice.occupancy import device_layout_sizes
    from vdevice.program import resident_bytes
    gen, sizes = generate(ops, texts), device_layout_sizes(ops, texts)
    shell = Program(ops, 1)  # the op list program_regions and resident_bytes read
    return max(veu_smem_bytes(program_regions(shell, gen, run), sizes, resident_bytes(shell, run))[0]
               for run in runs)


def choose_occupancy(ops: list[Op], texts: Mapping[str, str], plan: Any, most: int, floor: int = 0) -> Choice | None:
    """The most vEUs per SM the plan's interpreter keeps co-resident without spills, by ptxas' figures
    (vdevice.occupancy; counts at or below `floor` not compiled); None without nvcc (the build then keeps one vEU
    per SM). Each count is compiled with the next one down at once (PTXAS_JOBS; cached by source digest), so a
    count that fails costs no wait for the next."""
    from toolchain.nvcc import find_nvcc
    from vdevice.codegen import generate
    from vdevice.occupancy import PTXAS_JOBS, choose_veus_per_sm, feasible_counts, interpreter_usages
    if find_nvcc() is None or not plan.programs:  # no rProgram: no interpreter to fit
        return None
    threads, smem = veu_footprint(plan, ops, texts)
    counts = [k for k in feasible_counts(threads, smem, most) if k > floor]
    sources: dict[int, Any] = {}

    def usage(k: int) -> Any:
        batch = [j for j in counts if j <= k][:PTXAS_JOBS]
        for j in batch:
            sources.setdefault(j, generate(ops, texts, veus_per_sm=j))
        found = interpreter_usages([sources[j].source for j in batch], sources[k].include_dirs)
        return found[0]
    return choose_veus_per_sm(usage, threads, smem, most=most, floor=floor)


# ---- the choices (policy) -------------------------------------------------------------------------------------
class Trial(Protocol):
    """What the searches compare: the vEUs per SM ptxas allowed a trial plan (0: no plan), its prediction, and
    whether it was planned at that count (a trial held below the count it must beat is not)."""

    veus_per_sm: int
    predicted_us: float

    @property
    def planned(self) -> bool:
        """Whether the prediction is the plan's at its vEUs per SM."""
        ...


P = TypeVar("P")
TrialT = TypeVar("TrialT", bound=Trial)


def keep_fastest(trials: Sequence[TrialT], veus_per_sm: int, predicted_us: float,
                 eligible: Callable[[TrialT], bool] = lambda t: True) -> int:
    """The trial to keep instead of a plan on `veus_per_sm` vEUs per SM predicted at `predicted_us`: the fastest
    predicted of the `eligible`, planned ones that reach more vEUs per SM, if it beats that plan by more than
    MIN_GAIN; -1 otherwise."""
    better = [i for i, t in enumerate(trials) if t.planned and t.veus_per_sm > veus_per_sm and eligible(t)
              and t.predicted_us < predicted_us * (1.0 - MIN_GAIN)]
    return min(better, key=lambda i: trials[i].predicted_us, default=-1)


def search_trials(targets: Iterable[T], attempt: Callable[[T], tuple[TrialT, P]], trials: list[TrialT],
                  baseline_us: float, stop_when_slower: bool = True) -> list[P]:
    """Plan each target, fewest vEUs per SM first, appending its trial to `trials`; returns the plans in the same
    order. With `stop_when_slower`, stop after a trial predicted no faster than the best so far, or held by ptxas
    to no more vEUs per SM than the plan it competes with (the higher counts give up more)."""
    plans = []
    for target in targets:
        best = min([baseline_us] + [t.predicted_us for t in trials if t.planned])
        trial, plan = attempt(target)
        trials.append(trial)
        plans.append(plan)
        if stop_when_slower and trial.veus_per_sm and (not trial.planned or trial.predicted_us >= best):
            break
    return plans


@dataclass(frozen=True)
class BudgetTarget:
    """A vEU count to try, the registers per thread it leaves, and the instantiations over that budget."""

    veus_per_sm: int
    registers: int
    excluded: tuple[str, ...]  # kernel expressions left out, e.g. 'gemm_tc<128, 64, 0>'


def over_budget(registers: Mapping[str, int], budget: int) -> tuple[str, ...]:
    """The instantiations whose interpreter alone takes more than `budget` registers (ptxas, unbounded), hungriest
    first."""
    return tuple(sorted((e for e, r in registers.items() if r > budget), key=lambda e: (-registers[e], e)))


def hungriest(registers: Mapping[str, int], fat: Sequence[str]) -> tuple[str, ...]:
    """The first of `fat` (hungriest first) and those that take as many registers: left out together (one kernel's
    instantiations that differ only in a run-time-equivalent choice, such as tc.cu's copy width, often tie)."""
    return tuple(e for e in fat if registers[e] == registers[fat[0]]) if fat else ()


def budget_targets(registers: Mapping[str, int], threads: int, smem_bytes: int, veus_per_sm: int,
                   most: int) -> list[BudgetTarget]:
    """The vEU counts above `veus_per_sm` (at most `most`, fewest first) that some, but not all, of the
    instantiations do not fit, each to be tried first without the hungriest of those (unbounded registers overstate
    what a kernel needs: ptxas takes what it is given, so the trial leaves out the next hungriest at a time until
    ptxas agrees); empty when registers are not what keeps the count low."""
    out = []
    for k in range(veus_per_sm + 1, most + 1):
        budget = register_budget(threads, smem_bytes, k)
        fat = over_budget(registers, budget)
        if len(fat) == len(registers):
            break
        if fat:
            out.append(BudgetTarget(k, budget, hungriest(registers, fat)))
    return out


def launch_exprs(candidate: Any) -> set[str]:
    """The kernel expressions a scheduler Candidate launches."""
    return {kernel_expr(ln.kernel, ln.template_args) for ln in candidate.launches}


def without_candidates(workload: Any, excluded: tuple[str, ...]) -> tuple[Any, dict[str, int]] | None:
    """The workload less the candidates that launch an excluded instantiation, and how many nodes lost each
    variant; None when some node would keep none."""
    ops, dropped = [], Counter[str]()
    for spec in workload.ops:
        keep = [c for c in spec.candidates if not launch_exprs(c) & set(excluded)]
        if spec.candidates and not keep:
            return None
        dropped.update(c.variant for c in spec.candidates if c not in keep)
        ops.append(dataclasses.replace(spec, candidates=keep))
    return dataclasses.replace(workload, ops=ops), dict(dropped)


def held_count(q: Planned) -> tuple[int, float]:
    """The vEUs per SM ptxas allows a plan (or, capped, at most allows) and its prediction there (0.0 when it was not
    planned at that count)."""
    if q.occupancy is None or (q.occupancy.veus_per_sm == q.veus_per_sm and not q.occupancy.capped):
        return q.veus_per_sm, q.predicted_us
    return q.occupancy.veus_per_sm, 0.0


@dataclass
class BudgetTrial:
    """One plan without the candidates over a target's budget: the vEUs per SM ptxas then allows and its
    prediction (0 / 0.0 when no plan exists: some node has no other candidate; N / 0.0 when ptxas allows N, no more
    than the plan with every candidate, and it was not planned there)."""

    target: BudgetTarget
    veus_per_sm: int = 0
    predicted_us: float = 0.0
    dropped: dict[str, int] = field(default_factory=dict)  # variant -> nodes that lost it

    @property
    def planned(self) -> bool:
        """Whether the prediction is the plan's at its vEUs per SM."""
        return self.predicted_us > 0.0

    def record(self, q: Planned) -> None:
        """Take the figures of the trial's latest plan."""
        self.veus_per_sm, self.predicted_us = held_count(q)

    def describe(self) -> str:
        """One clause of the report line."""
        if not self.veus_per_sm:
            return f"{self.target.veus_per_sm}/SM: no plan without {', '.join(self.target.excluded)}"
        head = (f"{self.target.veus_per_sm}/SM (<= {self.target.registers} registers, without "
                f"{', '.join(self.target.excluded)}): ")
        if self.planned:
            return head + f"{self.veus_per_sm}/SM by ptxas, predicted {self.predicted_us:.1f} us"
        return head + f"at most {self.veus_per_sm}/SM by ptxas, not planned there"


@dataclass
class BudgetChoice:
    """What the register budget decided, for build.json and the report."""

    veus_per_sm_all: int  # with every candidate
    predicted_all_us: float
    trials: list[BudgetTrial] = field(default_factory=list)
    chosen: int = -1  # index into trials; -1: the plan with every candidate

    def decide(self) -> int:
        """The trial to keep: the fastest predicted of those that reach more vEUs per SM than the plan with every
        candidate, if it beats that plan by more than MIN_GAIN; -1 otherwise."""
        self.chosen = keep_fastest(self.trials, self.veus_per_sm_all, self.predicted_all_us)
        return self.chosen

    def to_json(self) -> dict:
        """The record in build.json's stats."""
        kept = self.trials[self.chosen] if self.chosen >= 0 else None
        return {"chosen": "budget" if kept else "all", "line": self.describe(),
                "veus_per_sm_all": self.veus_per_sm_all, "predicted_all_us": round(self.predicted_all_us, 3),
                "veus_per_sm": kept.veus_per_sm if kept else self.veus_per_sm_all,
                "registers_budget": kept.target.registers if kept else None,
                "excluded_instantiations": list(kept.target.excluded) if kept else [],
                "excluded_candidates": kept.dropped if kept else {},
                "trials": [{"veus_per_sm_target": t.target.veus_per_sm, "registers_budget": t.target.registers,
                            "excluded_instantiations": list(t.target.excluded), "excluded_candidates": t.dropped,
                            "veus_per_sm": t.veus_per_sm, "predicted_us": round(t.predicted_us, 3)}
                           for t in self.trials]}

    def describe(self) -> str:
        """One line for the build log and report."""
        head = (f"register budget: with every candidate {self.veus_per_sm_all} vEU(s)/SM, predicted "
                f"{self.predicted_all_us:.1f} us; tried " + "; ".join(t.describe() for t in self.trials))
        return head + (f"; kept the {self.trials[self.chosen].veus_per_sm}/SM plan" if self.chosen >= 0
                       else "; kept the plan with every candidate")


@dataclass
class ResidentTrial:
    """A plan whose resident slices are sized for `target` vEUs per SM: what the pass packed and the scheduler
    pinned, the vEU's shared memory, ptxas' figures and the vEUs per SM they allow, and the prediction (0.0: not
    planned at that count, see BudgetTrial)."""

    target: int
    families: int = 0  # packed by the resident_weights pass
    pinned: int = 0  # of those, families whose rTasks run pinned (the rest stream)
    region_bytes: int = 0  # each vEU's resident region: the largest pinned slice
    smem_bytes: int = 0  # a vEU's shared memory: rTask area, control block, region, interpreter's static bytes
    registers: int = 0
    spill_bytes: int = 0
    veus_per_sm: int = 0
    predicted_us: float = 0.0
    excluded: list[str] = field(default_factory=list)  # instantiations the register budget left out of the plan
    note: str = ""  # why it was not planned, when it was not

    @property
    def planned(self) -> bool:
        """Whether the prediction is the plan's at its vEUs per SM."""
        return self.predicted_us > 0.0

    def describe(self) -> str:
        """One clause of the report line."""
        if self.note:
            return f"slices for {self.target}/SM: {self.note}"
        without = f" (register budget: without {', '.join(self.excluded)})" if self.excluded else ""
        predicted = f"predicted {self.predicted_us:.1f} us" if self.planned else "not planned there"
        return (f"slices for {self.target}/SM: {self.pinned} of {self.families} families pinned, region "
                f"{self.region_bytes} B, {self.smem_bytes} B per vEU, {self.registers} registers, {self.spill_bytes} "
                f"B spilled -> {self.veus_per_sm}/SM{without}, {predicted}")


def resident_trial(q: Planned, budget: BudgetChoice | None) -> ResidentTrial:
    """The record of a plan whose slices were sized for q.sized_for's vEUs per SM."""
    threads, smem = veu_footprint(q.sch.plan, q.ops, q.texts)
    pinned = [op.launch.resident for op in q.sch.plan.ops if op.pinned]
    usage = q.occupancy.usage if q.occupancy else None
    kept = budget.trials[budget.chosen] if budget is not None and budget.chosen >= 0 else None
    per_sm, predicted = held_count(q)
    return ResidentTrial(q.sized_for.veus_per_sm, packed_families(q.sch.graph), len({r.family for r in pinned}),
                         max((r.slice_bytes for r in pinned), default=0),
                         smem + (usage.static_smem if usage else 0), usage.registers if usage else 0,
                         usage.spill_bytes if usage else 0, per_sm, predicted,
                         list(kept.target.excluded) if kept else [])


@dataclass
class ResidentChoice:
    """The resident-slice search: trials[0] sizes slices as the build's target, the plan the others compete with."""

    trials: list[ResidentTrial]
    chosen: int = 0

    def decide(self) -> int:
        """The trial to keep: keep_fastest over the higher sizings against the first, among those that pin every
        family the first pins. Weight-stationary layers are the point (issue 15: weights read once per inference),
        and a plan that streams some layer gains only by the cost model's L2 term for weights that fit L2 (an
        estimate; full-size LSTM-TC with 16 KB headroom predicted 9% faster streaming 3 of 10 layers, 31x the
        weight bytes)."""
        base = self.trials[0]
        self.chosen = keep_fastest(self.trials[1:], base.veus_per_sm, base.predicted_us,
                                   lambda t: t.pinned >= base.pinned) + 1
        return self.chosen

    def to_json(self) -> dict:
        """The record in build.json's stats."""
        return {"line": self.describe(), "chosen": self.trials[self.chosen].target,
                "veus_per_sm": self.trials[self.chosen].veus_per_sm,
                "trials": [dataclasses.asdict(t) | {"predicted_us": round(t.predicted_us, 3)} for t in self.trials]}

    def describe(self) -> str:
        """One line for the build log and report."""
        return (f"resident slices: tried {'; '.join(t.describe() for t in self.trials)}; kept the slices for "
                f"{self.trials[self.chosen].target}/SM")
