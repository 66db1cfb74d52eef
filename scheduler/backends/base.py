"""What a backend registers (`Backend`: the hooks the workload, the placement's prices and the runtime call) and the
shared piece of the two rKernel backends: a node's candidates from the registry's bindings of one backend."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from kernel_corpus.bindings import NodeInfo
from vdevice.target import BackendName, Target, TargetKind


@dataclass
class Candidate:
    """One rKernel choice for a node: a binding variant and its concrete launches, run in order every inference,
    and its setup launches (Launch.setup: tables and counters of the node's shape), run once when the build loads."""

    variant: str
    kind: str  # fast | efficient | only: the corpus's hint
    launches: list[Any]  # kernel_corpus.bindings.Launch
    source: str = ""
    backend: str = BackendName.RTASK  # the binding's backend: rtask (the corpus) or user (a user library)
    setup: list[Any] = field(default_factory=list)

    @staticmethod
    def of(binding: Any, info: NodeInfo) -> "Candidate":
        """A binding's candidate for a node: its launches split into the per-inference ones and the setup ones."""
        launches = binding.launch(info)
        return Candidate(binding.variant, binding.kind, [ln for ln in launches if not ln.setup], binding.source,
                         binding.backend, [ln for ln in launches if ln.setup])


# A node's choices from one backend: (what it offers, why it offers nothing else: one line per refusal).
CandidatesHook = Callable[[Any, NodeInfo, Target], "tuple[list[Candidate], list[str]]"]
CallsHook = Callable[[NodeInfo, list[str], list[str], Target], "tuple[list[Any], list[str]]"]


def always(kind: TargetKind) -> str | None:
    """Available on every target."""
    return None


@dataclass(frozen=True)
class Backend:
    """One registered backend. An rKernel backend contributes `candidates` (its nodes run as rTasks inside
    rPrograms); a call backend contributes `calls` (scheduler.plan.LibraryCall steps that close the rProgram before
    them), and may `fallback` for a node nothing else runs, prices a call for placement (`cost(call, device)`,
    scheduler.profiler.DeviceSpec) and runs it (`run(call, arrays, xp)`, xp numpy or cupy)."""

    name: BackendName
    about: str
    available: Callable[[TargetKind], str | None] = always  # None, or why it cannot run on this machine
    candidates: CandidatesHook | None = None
    calls: CallsHook | None = None
    fallback: CallsHook | None = None
    cost: Callable[[Any, Any], float] | None = None
    run: Callable[[Any, dict, Any], None] | None = None
    in_default: bool = False  # planned for by a build that names no backends (with what it `takes`, if any)
    takes: str = ""  # what the build must give for it to be enabled, e.g. "--user-lib FOLDER" (empty: nothing)
    libraries: Callable[[Any, list], Any] | None = None  # (registry, folders) -> the registry with their bindings

    @property
    def is_call(self) -> bool:
        """Whether its nodes are plan steps of their own (not rTasks)."""
        return self.calls is not None


def binding_candidates(backend: BackendName) -> CandidatesHook:
    """The candidates hook of an rKernel backend: the registry's bindings of `backend` that apply to the node."""
    def candidates(registry: Any, info: NodeInfo, target: Target) -> tuple[list[Candidate], list[str]]:
        found, reasons = [], []
        for binding in registry.for_op(info.op_type):
            if binding.backend != backend:
                continue
            refused = binding.refusal(info)
            if refused is None:
                found.append(Candidate.of(binding, info))
            else:
                reasons.append(f"{binding.variant}: {refused.reason}")
        return found, reasons
    return candidates
