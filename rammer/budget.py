"""The register budget of a GPU build (policy; the figures come from vdevice.occupancy): the interpreter needs the
registers of its most register-hungry rKernel instantiation, so one fat candidate can cost every other rTask its
co-resident vEUs. When the vEUs per SM drop for that reason, the build also plans without the candidates that do
not fit a higher count's budget, and keeps whichever plan the cost model predicts faster."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from toolchain.cxx import kernel_expr
from vdevice.occupancy import register_budget


@dataclass(frozen=True)
class BudgetTarget:
    """A vEU count to try, the registers per thread it leaves, and the instantiations over that budget."""

    veus_per_sm: int
    registers: int
    excluded: tuple[str, ...]  # kernel expressions, e.g. 'gemm_tc<128, 64, 0>'


def budget_target(registers: Mapping[str, int], threads: int, smem_bytes: int, veus_per_sm: int,
                  most: int) -> BudgetTarget | None:
    """The most vEUs per SM above `veus_per_sm` (at most `most`) whose register budget some, but not all, of the
    instantiations exceed; None when there is none (registers are not what keeps the count low)."""
    for k in range(most, veus_per_sm, -1):
        budget = register_budget(threads, smem_bytes, k)
        fat = tuple(sorted(e for e, r in registers.items() if r > budget))
        if fat and len(fat) < len(registers):
            return BudgetTarget(k, budget, fat)
    return None


def launch_exprs(candidate: Any) -> set[str]:
    """The kernel expressions a scheduler Candidate launches."""
    return {kernel_expr(ln.kernel, ln.template_args) for ln in candidate.launches}


def without_candidates(workload: Any, excluded: tuple[str, ...]) -> tuple[Any, list[str]] | None:
    """The workload less the candidates that launch an excluded instantiation, and those candidates as 'node:
    variant'; None when some node would keep none."""
    ops, dropped = [], []
    for spec in workload.ops:
        keep = [c for c in spec.candidates if not launch_exprs(c) & set(excluded)]
        if spec.candidates and not keep:
            return None
        dropped += [f"{spec.name}: {c.variant}" for c in spec.candidates if c not in keep]
        ops.append(dataclasses.replace(spec, candidates=keep))
    return dataclasses.replace(workload, ops=ops), dropped


@dataclass
class BudgetChoice:
    """What the register budget decided, for build.json and the report."""

    veus_per_sm_all: int  # with every candidate
    predicted_all_us: float
    target: BudgetTarget
    veus_per_sm_budget: int = 0  # reached without the excluded candidates (ptxas' figures); 0 when not planned
    predicted_budget_us: float = 0.0
    dropped: list[str] = field(default_factory=list)  # 'node: variant'
    chosen: str = "all"  # all | budget
    why: str = ""

    def decide(self) -> str:
        """Keep the budget plan when it reaches more vEUs per SM and the cost model predicts it faster."""
        if not self.veus_per_sm_budget:
            self.why = "no plan without the excluded candidates (some node has no other)"
        elif self.veus_per_sm_budget <= self.veus_per_sm_all:
            self.why = (f"without them ptxas still allows only {self.veus_per_sm_budget} vEU(s) per SM, not "
                        f"{self.target.veus_per_sm}")
        elif self.predicted_budget_us < self.predicted_all_us:
            self.chosen = "budget"
        self.why = self.why or (f"predicted {self.predicted_budget_us:.1f} us at {self.veus_per_sm_budget}/SM "
                                f"without them against {self.predicted_all_us:.1f} us at {self.veus_per_sm_all}/SM "
                                "with all")
        return self.chosen

    def to_json(self) -> dict:
        """The record in build.json's stats."""
        return {"chosen": self.chosen, "why": self.why, "line": self.describe(),
                "veus_per_sm_all": self.veus_per_sm_all, "veus_per_sm_budget": self.veus_per_sm_budget,
                "registers_budget": self.target.registers,
                "excluded_instantiations": list(self.target.excluded), "excluded_candidates": self.dropped,
                "predicted_all_us": round(self.predicted_all_us, 3),
                "predicted_budget_us": round(self.predicted_budget_us, 3)}

    def describe(self) -> str:
        """One line for the build log and report."""
        verb = "kept" if self.chosen == "budget" else "not taken"
        return (f"register budget {self.target.registers}/thread for {self.target.veus_per_sm} vEUs/SM "
                f"({verb}): excluded {', '.join(self.target.excluded)}; {self.why}")
