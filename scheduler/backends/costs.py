"""Prices of backend calls for placement, and the on-disk profile cache they are kept in: one JSON file per device,
entries keyed by backend, op, shapes and variant. Measured times (on a GPU: CUDA events around the call, median of
many runs) replace the cost model for the entries the cache holds; the rest come from the cost model."""
from __future__ import annotations

import json
import re
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from toolchain.cache import cache_dir

from ..graph import SchedulerError
from ..plan import LibraryCall
from . import call_cost, run_call


def call_key(call: LibraryCall) -> str:
    """backend|op|input shapes|variant (the function and the attributes that change the work)."""
    shapes = ";".join("-" if s is None else "x".join(map(str, s)) for s in call.input_shapes)
    attrs = ",".join(f"{k}={v}" for k, v in sorted(call.attrs.items()))
    return f"{call.backend}|{call.op_type}|{shapes}|{call.function}({attrs})"


@dataclass
class BackendCache:
    """Measured backend call times of one device: {"device", "entries": {key: {"us", "runs"}}}."""

    device: str
    folder: Path | None = None
    entries: dict[str, dict] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0

    def __post_init__(self) -> None:
        slug = re.sub(r"[^A-Za-z0-9]+", "-", self.device).strip("-").lower()
        self.path = (self.folder or cache_dir("profiles")) / f"{slug}-backends.json"
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text())
                self.entries = {k: dict(v) for k, v in data["entries"].items() if float(v["us"]) > 0}
            except (ValueError, KeyError, TypeError) as exc:
                raise SchedulerError(f"profile cache {self.path} is corrupt ({exc}); delete it to re-measure") from None

    def get(self, key: str) -> float | None:
        """A measured time, counting hits and misses."""
        hit = self.entries.get(key)
        if hit is None:
            self.misses += 1
            return None
        self.hits += 1
        return float(hit["us"])

    def put(self, key: str, us: float, runs: int) -> None:
        """Record one measurement (kept in memory until save)."""
        self.entries[key] = {"us": us, "runs": runs}

    def save(self) -> None:
        """Write atomically."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"device": self.device, "entries": self.entries}, indent=1, sort_keys=True))
        tmp.replace(self.path)


class BackendCosts:
    """Prices library calls: measured when the cache holds the call on this device, the cost model otherwise."""

    def __init__(self, device: Any, cache: BackendCache | None = None) -> None:
        self.device, self.cache = device, cache

    def call_us(self, call: LibraryCall) -> float:
        """Predicted or measured µs of one call."""
        if self.cache is not None:
            us = self.cache.get(call_key(call))
            if us is not None:
                return us
        return call_cost(call, self.device)

    def describe(self) -> str:
        """One line: where call prices come from."""
        if self.cache is None:
            return "library calls: cost model"
        return (f"library calls: {len(self.cache.entries)} measured in {self.cache.path} "
                f"({self.cache.hits} hits, {self.cache.misses} misses)")


def measure_call(call: LibraryCall, target: str, runs: int = 50) -> float:
    """Median µs of one call on the target on random inputs: CUDA events on the GPU, wall time with numpy on the
    CPU (a CPU time: it prices CPU plans only)."""
    import numpy as np
    rng = np.random.default_rng(0)
    host = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(call.inputs, call.input_shapes)
            if n and s is not None}
    host |= {n: np.zeros(s, np.float32) for n, s in zip(call.outputs, call.output_shapes) if n}
    if target != "gpu":
        return _median_us(lambda: run_call(call, host, np), runs)
    import cupy
    dev = {k: cupy.asarray(v) for k, v in host.items()}
    body: Callable[[], None] = lambda: run_call(call, dev, cupy)
    body()
    samples = []
    for _ in range(runs):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        body()
        stop.record()
        stop.synchronize()
        samples.append(cupy.cuda.get_elapsed_time(start, stop) * 1e3)
    return float(statistics.median(samples))


def _median_us(body: Callable[[], None], runs: int) -> float:
    """Median wall time of `body` in µs after one warm-up run."""
    body()
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        body()
        samples.append((time.perf_counter() - t) * 1e6)
    return float(statistics.median(samples))
