"""RammerBase inside one rProgram: one operator at a time over all vEUs, each waiting for the one before."""
from __future__ import annotations

from ..mechanism import Mechanism
from ..plan import Choice, MakeOp, Plan, default_vdevice_op
from ..profiler import Profiler
from ..workload import Workload
from .common import fastest

NAME = "sequential"


def plan(workload: Workload, profiler: Profiler, veus: int | None = None,
         make_op: MakeOp = default_vdevice_op) -> Plan:
    """Topological order, fastest rKernel per op, a barrier on the previous op's rTasks before each op."""
    mech = Mechanism(profiler, veus)
    b = mech.fork()
    choices: dict[str, Choice] = {}
    previous = None
    for spec in workload.ops:
        cand = fastest(profiler, spec, mech.veus)
        ids = b.schedule_node(spec, cand, extra=previous)
        previous = b.placement(ids[-1])
        choices[spec.name] = Choice(cand.variant, f"fastest of {len(spec.candidates)} on {mech.veus} vEUs")
    mech.commit(b)
    return mech.finish(NAME, choices, [], make_op)
