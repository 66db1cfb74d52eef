"""What the emulator's sanitizers cost on the verify set (a benchmark, not a test): every kernel of
tests/verify_kernels through `verify_file` with no sanitizer, memcheck alone, and all three, modules warm (built
and cached first), median of N runs each, in process CPU time (the emulator runs in-process; on a shared machine
wall time measures the neighbours). Usage: python3 tests/sanitizer_bench.py [N]"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from rtransform.run import run_file
from rtransform.verify import verify_file

KDIR = Path(__file__).resolve().parent / "verify_kernels"
MODES = {"none": (), "memcheck": ("memcheck",), "all": ("memcheck", "racecheck", "synccheck")}


def main(repeats: int = 3) -> None:
    names = sorted(p.stem for p in KDIR.glob("*.cu"))
    for label, fn in (("rtransform verify (convert + legacy run + persistent run)", verify_file),
                      ("rtransform run (one legacy launch)", run_file)):
        totals = {m: 0.0 for m in MODES}
        for name in names:
            cu, spec = str(KDIR / f"{name}.cu"), str(KDIR / f"{name}.spec.yaml")
            for mode, san in MODES.items():
                fn(cu, spec, sanitize=san)  # build (or load from the cache) first: run time only below
                samples = []
                for _ in range(repeats):
                    t = time.process_time()
                    fn(cu, spec, sanitize=san)
                    samples.append(time.process_time() - t)
                totals[mode] += statistics.median(samples)
        print(f"{label}: {len(names)} kernels of the verify set, median of {repeats} warm runs each, summed (CPU s)")
        for mode, secs in totals.items():
            print(f"  sanitize={mode:9s} {secs:7.3f} s  ({secs / totals['none']:.2f}x the unsanitized run)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
