"""ptxas' registers of the legacy kernels the baselines launch, so a baseline's occupancy is the one its kernels
get (not an assumed 64 registers). Each legacy source's instantiations are compiled for sm_90 once, all in one
nvcc run (`-Xptxas -v`, their addresses taken so nvcc instantiates them), and kept in the toolchain cache by the
source's content and the kernel expression. Without nvcc the figure is unknown (None) and the profiler assumes
DeviceSpec.legacy_registers."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from kernel_corpus.bindings import source_digest
from toolchain.cache import cache_dir, content_key
from toolchain.demangle import demangle_entry
from toolchain.nvcc import find_nvcc
from toolchain.ptxas import RESOURCE_ARCH, parse_ptxas, run_ptxas

LEGACY_DIR = Path(__file__).resolve().parent.parent / "kernel_corpus" / "legacy"
UNKNOWN = -1  # cached: the expression did not compile or ptxas did not report it (never asked again)


def force_source(path: Path, exprs: Iterable[str]) -> str:
    """A translation unit that includes one legacy source and takes the address of each kernel instantiation."""
    refs = ",\n  ".join(f"(const void*)&{e}" for e in exprs)
    return f'#include "{path}"\nconst void* rammer_instantiate[] = {{\n  {refs}\n}};\n'


def entry_expr(symbol: str) -> str:
    """'kernel<args>' of a mangled entry, in toolchain.cxx.kernel_expr's spelling."""
    name, targs = demangle_entry(symbol)
    return f"{name}<{targs}>" if targs else name


class LegacyRegisters:
    """Callable: a corpus launch -> ptxas' registers per thread of its legacy kernel, or None when unknown."""

    def __init__(self, folder: Path | None = None, legacy_dir: Path = LEGACY_DIR) -> None:
        self.path = (folder or cache_dir("registers")) / f"{RESOURCE_ARCH}-legacy.json"  # {key: registers}
        self.known: dict[str, int] = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.sources = {source_digest(p): p for p in sorted(legacy_dir.glob("*.cu"))}
        self.nvcc = find_nvcc()

    def key(self, launch: Any) -> str:
        """Cache key: the source's digest, the expression, the architecture."""
        return content_key(launch.source_digest, launch.expr, RESOURCE_ARCH)

    def __call__(self, launch: Any) -> int | None:
        """ptxas' registers of the launch's kernel (compiling its source's instantiations if not cached)."""
        key = self.key(launch)
        if key not in self.known:
            self.prefetch([launch])
        regs = self.known.get(key, UNKNOWN)
        return None if regs == UNKNOWN else regs

    def prefetch(self, launches: Iterable[Any]) -> None:
        """Compile every uncached instantiation of these launches, one nvcc run per legacy source."""
        todo: dict[Path, dict[str, str]] = {}
        for launch in launches:
            path = self.sources.get(getattr(launch, "source_digest", ""))
            if path is not None and self.key(launch) not in self.known:
                todo.setdefault(path, {})[launch.expr] = self.key(launch)
        if not todo or self.nvcc is None:
            return
        for path, keys in todo.items():
            found = self.compile(path, list(keys))
            for expr, key in keys.items():
                self.known[key] = found.get(expr, UNKNOWN)
        self.save()

    def compile(self, path: Path, exprs: list[str]) -> dict[str, int]:
        """expression -> registers for one source's instantiations ({} when nvcc fails)."""
        assert self.nvcc is not None
        ok, log = run_ptxas(force_source(path, exprs), self.nvcc, [str(path.parent)])
        if not ok:
            return {}
        found = {entry_expr(sym): e["registers"] for sym, e in parse_ptxas(log).items() if e["registers"]}
        return {expr: found.get(expr, UNKNOWN) for expr in exprs}

    def save(self) -> None:
        """Write the cache atomically."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{id(self)}.tmp")
        tmp.write_text(json.dumps(self.known, indent=1, sort_keys=True))
        tmp.replace(self.path)
