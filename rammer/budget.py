"""The vEU-count searches of a GPU build (policy; the figures come from vdevice.occupancy), which try alternative
plans at higher vEU counts per SM and keep the one the cost model predicts fastest (search_trials, keep_fastest):

- the register budget: the interpreter needs the registers of its most register-hungry rKernel instantiation, so one
  fat candidate can cost every other rTask its co-resident vEUs. When the vEUs per SM drop for that reason, the
  build also plans without the candidates that do not fit a higher count's budget;
- resident slices: weight-stationary layers fill a vEU's shared memory (docs/ARCHITECTURE.md §7), so the build also
  plans with the slices sized for k vEUs per SM (smaller slices on more vEUs)."""
from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, TypeVar

from toolchain.cxx import kernel_expr
from vdevice.occupancy import register_budget


# A plan without some candidates must be predicted this much faster to be kept: the cost model's per-kernel
# figures are estimates (scheduler/profiler.py), so a smaller gain is no reason to give up a kernel (estimate).
MIN_GAIN = 0.02


class Trial(Protocol):
    """What the searches compare: the vEUs per SM ptxas allowed a trial plan (0: no plan) and its prediction."""

    veus_per_sm: int
    predicted_us: float


T = TypeVar("T")
P = TypeVar("P")
TrialT = TypeVar("TrialT", bound=Trial)


def keep_fastest(trials: Sequence[TrialT], veus_per_sm: int, predicted_us: float,
                 eligible: Callable[[TrialT], bool] = lambda t: True) -> int:
    """The trial to keep instead of a plan on `veus_per_sm` vEUs per SM predicted at `predicted_us`: the fastest
    predicted of the `eligible` ones that reach more vEUs per SM, if it beats that plan by more than MIN_GAIN; -1
    otherwise."""
    better = [i for i, t in enumerate(trials) if t.veus_per_sm > veus_per_sm and eligible(t)
              and t.predicted_us < predicted_us * (1.0 - MIN_GAIN)]
    return min(better, key=lambda i: trials[i].predicted_us, default=-1)


def search_trials(targets: Iterable[T], attempt: Callable[[T], tuple[TrialT, P]], trials: list[TrialT],
                  baseline_us: float, stop_when_slower: bool = True) -> list[P]:
    """Plan each target, fewest vEUs per SM first, appending its trial to `trials`; returns the plans in the same
    order. With `stop_when_slower`, stop after a trial predicted no faster than the best so far (the higher counts
    give up more)."""
    plans = []
    for target in targets:
        best = min([baseline_us] + [t.predicted_us for t in trials if t.veus_per_sm])
        trial, plan = attempt(target)
        trials.append(trial)
        plans.append(plan)
        if stop_when_slower and trial.veus_per_sm and trial.predicted_us >= best:
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


@dataclass
class BudgetTrial:
    """One plan without the candidates over a target's budget: the vEUs per SM ptxas then allows and its
    prediction (0 / 0.0 when no plan exists: some node has no other candidate)."""

    target: BudgetTarget
    veus_per_sm: int = 0
    predicted_us: float = 0.0
    dropped: dict[str, int] = field(default_factory=dict)  # variant -> nodes that lost it

    def describe(self) -> str:
        """One clause of the report line."""
        if not self.veus_per_sm:
            return f"{self.target.veus_per_sm}/SM: no plan without {', '.join(self.target.excluded)}"
        return (f"{self.target.veus_per_sm}/SM (<= {self.target.registers} registers, without "
                f"{', '.join(self.target.excluded)}): {self.veus_per_sm}/SM by ptxas, predicted "
                f"{self.predicted_us:.1f} us")


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
    pinned, the vEU's shared memory, ptxas' figures and the vEUs per SM they allow, and the prediction."""

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

    def describe(self) -> str:
        """One clause of the report line."""
        without = f" (register budget: without {', '.join(self.excluded)})" if self.excluded else ""
        return (f"slices for {self.target}/SM: {self.pinned} of {self.families} families pinned, region "
                f"{self.region_bytes} B, {self.smem_bytes} B per vEU, {self.registers} registers, {self.spill_bytes} "
                f"B spilled -> {self.veus_per_sm}/SM{without}, predicted {self.predicted_us:.1f} us")


@dataclass
class ResidentChoice:
    """The resident-slice search: trials[0] sizes slices for one vEU per SM, the plan the others compete with."""

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
