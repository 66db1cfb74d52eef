"""`rammer profile MODEL`: fill the profile cache ahead of a build. Every candidate of every enabled backend is
timed on the target where the cache lacks it: library calls (CUDA events around the cuBLAS/cuDNN call on a GPU;
numpy wall time on the CPU target), rKernel launch shapes through the measured profiler (on a GPU; on the CPU
target only with --rtasks, since emulator times say nothing about a GPU). Prints the caches' sizes and hits."""
from __future__ import annotations

import json
import sys
import time

from scheduler.graph import SchedulerError
from scheduler.onnx_import import ModelError
from scheduler.pipeline import load_workload
from toolchain.exits import Exit

from .build import CPU_DEFAULT_VEUS, corpus_registry, enabled_backends, make_profiler, profile_workload, source_paths


def profile_command(model: str, target: str = "gpu", backends: str | None = None, veus: int | None = None,
                    runs: int = 50, rtasks: bool = False, user_libs: tuple[str, ...] = (),
                    as_json: bool = False) -> int:
    """Measure what the caches lack; one line on error, a summary (or JSON) on success."""
    from scheduler.backends import available_backends
    from scheduler.backends.costs import BackendCache, call_key, measure_call
    from scheduler.profiler import H100
    say = (lambda *a: None) if as_json else print
    t0 = time.perf_counter()
    try:
        names = tuple(b.strip() for b in backends.split(",")) if backends else \
            tuple(b for b in available_backends(target) if b != "user" or user_libs)
        names, registry = enabled_backends(names, target, corpus_registry(None), user_libs)
        num_veus = veus or (CPU_DEFAULT_VEUS if target == "cpu" else H100.sms)
        profiler = make_profiler("measured", target, num_veus)
        _, workload = load_workload(model, registry, backends=names, target=target)
        cache = BackendCache(profiler.device.name)
        calls = {call_key(c): c for spec in workload.ops for c in spec.calls}
        hits = sum(1 for k in calls if k in cache.entries)
        todo = [(k, c) for k, c in calls.items() if k not in cache.entries]
        for key, call in todo:
            cache.put(key, measure_call(call, target, runs), runs)
        if todo:
            cache.save()
        measured, cached = 0, 0
        if (target == "gpu" or rtasks) and any(b != "library" for b in names):
            measured, cached = profile_workload(workload, profiler, target, source_paths(registry), quiet=as_json)
    except SchedulerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return Exit.USAGE if isinstance(exc, ModelError) else Exit.FAILED
    except Exception as exc:  # the device's own errors: one line
        print(f"error: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", file=sys.stderr)
        return 1
    summary = {"device": profiler.device.name, "backends": list(names),
               "library": {"cache": str(cache.path), "entries": len(cache.entries), "measured": len(todo),
                           "hits": hits},
               "rkernels": {"cache": str(profiler.cache.path) if profiler.cache else None, "measured": measured,
                            "hits": cached, "entries": len(profiler.cache.entries) if profiler.cache else 0},
               "seconds": round(time.perf_counter() - t0, 2)}
    if as_json:
        print(json.dumps(summary))
        return 0
    lib, rk = summary["library"], summary["rkernels"]
    say(f"profiled {model} on {profiler.device.name} in {summary['seconds']} s")
    say(f"  library calls: {lib['measured']} measured, {lib['hits']} cache hits; {lib['entries']} entries in "
        f"{lib['cache']}")
    if target == "gpu" or rtasks:
        say(f"  rKernel launch shapes: {rk['measured']} measured, {rk['hits']} cache hits; {rk['entries']} entries "
            f"in {rk['cache']}")
    else:
        say("  rKernel launch shapes: not measured on the CPU target (emulator times; pass --rtasks to time them)")
    return 0
