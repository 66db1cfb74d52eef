"""Rammer's wavefront policy (Algorithm 1): schedule the DFG wave by wave, choosing rKernels per wave, placing
each rTask on the vEU where it starts earliest, and opening a new rProgram when the profile says merging is slower."""
from __future__ import annotations

from ..mechanism import DepSet, Mechanism, ProgramBuilder
from ..plan import Choice, MakeOp, Plan, default_vdevice_op
from ..profiler import Profiler
from ..workload import Candidate, Workload
from .common import candidate_rtasks, fastest, most_efficient, waves

NAME = "wavefront"


def schedule_wave(b: ProgramBuilder, workload: Workload, wave: list[int], picks: dict[int, Candidate],
                  barrier_after: list[int] | None) -> ProgramBuilder:
    """Append every op of the wave: each waits on its predecessors' rTasks, and, when coarse, on every rTask
    of the previous wave (`barrier_after`)."""
    barrier: DepSet | None = b.barrier_after(barrier_after) if barrier_after else None
    for i in wave:
        b.schedule_node(workload.ops[i], picks[i], extra=barrier)
    return b


def select_rkernels(mech: Mechanism, workload: Workload, wave: list[int],
                    barrier_after: list[int] | None) -> tuple[dict[int, Candidate], str]:
    """Fastest rKernels when the wave cannot fill the vDevice; else the most efficient ones if that is faster."""
    prof, veus = mech.profiler, mech.veus
    fast = {i: fastest(prof, workload.ops[i], veus) for i in wave}
    tasks = sum(candidate_rtasks(c) for c in fast.values())
    if tasks < veus:
        return fast, f"fastest: wave of {tasks} rTasks cannot fill {veus} vEUs"
    eff = {i: most_efficient(prof, workload.ops[i]) for i in wave}
    if all(eff[i] is fast[i] for i in wave):
        return fast, f"fastest, also the most efficient (wave of {tasks} rTasks on {veus} vEUs)"
    t_fast = schedule_wave(mech.fork(), workload, wave, fast, barrier_after).time_us()
    t_eff = schedule_wave(mech.fork(), workload, wave, eff, barrier_after).time_us()
    if t_eff < t_fast:
        return eff, (f"most efficient: wave of {tasks} rTasks overfills {veus} vEUs and finishes at "
                     f"{t_eff:.1f} us vs {t_fast:.1f} us with the fastest")
    return fast, (f"fastest: wave of {tasks} rTasks overfills {veus} vEUs but the most efficient would finish "
                  f"at {t_eff:.1f} us vs {t_fast:.1f} us")


def plan(workload: Workload, profiler: Profiler, veus: int | None = None, fine_grained: bool = True,
         make_op: MakeOp = default_vdevice_op) -> Plan:
    """Algorithm 1: per wave SelectRKernels, Schedule into the current rProgram (P1) or a new one (P2)."""
    mech = Mechanism(profiler, veus)
    choices: dict[str, Choice] = {}
    notes: list[str] = []
    previous: list[int] | None = None
    for k, wave in enumerate(waves(workload)):
        barrier_after = None if fine_grained else previous
        picks, why = select_rkernels(mech, workload, wave, barrier_after)
        p1 = schedule_wave(mech.fork(), workload, wave, picks, barrier_after)
        if mech.current.counts.any():
            p2 = schedule_wave(mech.fresh(), workload, wave, picks, barrier_after)
            t_cur, t1, t2 = mech.current.program_us(), p1.program_us(), p2.program_us()
            if t1 <= t_cur + t2:
                mech.commit(p1)
            else:
                notes.append(f"wave {k}: new rProgram ({t1:.1f} us merged > {t_cur:.1f} + {t2:.1f} us split)")
                mech.commit(p2)
        else:
            mech.commit(p1)
        for i in wave:
            choices[workload.ops[i].name] = Choice(picks[i].variant, f"wave {k}: {why}")
        previous = wave
    return mech.finish(NAME, choices, notes, make_op)
