"""`python -m scheduler MODEL.onnx`: plan a model with one policy, print a summary, write plan.json."""
from __future__ import annotations

import argparse
import sys

from .graph import SchedulerError
from kernel_corpus.bindings import registry as default_registry

from .build import make_profiler, profile_workload, source_paths
from .pipeline import load_workload, plan_workload
from .policies import POLICIES
from .profiler import H100


def parse(argv: list[str]) -> argparse.Namespace:
    """Command-line options."""
    ap = argparse.ArgumentParser(prog="python -m scheduler", description=__doc__)
    ap.add_argument("model", help="ONNX file with static shapes")
    ap.add_argument("--policy", choices=sorted(POLICIES), default="wavefront")
    ap.add_argument("--veus", type=int, default=None, help=f"vEUs of the vDevice (default {H100.sms})")
    ap.add_argument("--profile", choices=["auto", "model", "measured"], default="model",
                    help="rTask times: the cost model, or measured on the GPU (cached; auto: when one is visible)")
    ap.add_argument("-o", "--out", default=None, help="write plan.json here")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Plan, report, save; a scheduler error is one line on stderr and exit status 1."""
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        profiler = make_profiler(args.profile, "gpu", args.veus or H100.sms)
        print(profiler.describe())
        graph, workload = load_workload(args.model)
        if profiler.mode == "measured":
            done, cached = profile_workload(workload, profiler, "gpu", source_paths(default_registry))
            print(f"profiler: {done} launch shape(s) measured, {cached} from the cache")
        sch = plan_workload(graph, workload, args.policy, profiler, num_veus=args.veus)
    except SchedulerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    plan = sch.plan
    tasks = sum(p.steps(v) for p in plan.programs for v in range(p.num_veus))
    print(f"{args.policy}: {len(sch.workload.ops)} operators, {len(plan.ops)} launches, {tasks} rTasks, "
          f"{len(plan.programs)} rProgram(s), predicted {plan.predicted_us:.1f} us")
    for name, us in plan.baselines_us.items():
        print(f"  the same launches {name}: predicted {us:.1f} us ({us / max(plan.predicted_us, 1e-9):.2f}x)")
    for note in plan.notes:
        print(f"note: {note}")
    if args.out:
        plan.save(args.out)
        print(f"plan written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
