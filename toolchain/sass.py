"""Static SASS of compiled kernels (no GPU needed): the instructions of each function, its loops, the instruction mix
of its hot loop (tensor-core HMMA, FP32 FFMA, 128-bit and shared loads, global against generic loads) and ptxas's
registers and spills. The one SASS module: the kernel tables, the tests and the dispatch listings read it.

`python3 -m toolchain.sass FILE.cu [-I DIR ...] [--arch sm_90] [--match NAME] [--listing NAME]` compiles FILE with
nvcc to a cubin, disassembles it with cuobjdump (the nvidia-cuda-cuobjdump wheel, extra `sass`) and prints one line
per function, or with --listing the SASS of the one function whose mangled name contains NAME.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .demangle import demangle_entry
from .nvcc import DEFAULT_ARCH, find_nvcc, nvcc_command
from .ptxas import parse_ptxas

_LINE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_TARGET = re.compile(r"0x([0-9a-f]+)")
CUOBJDUMP_WHEEL_DIRS = ("cu13", "cuda_cuobjdump", "cu12")  # site-packages/nvidia/X/bin/cuobjdump


def find_cuobjdump() -> str | None:
    """cuobjdump on the PATH, beside the toolkit's nvcc, or from the nvidia-cuda-cuobjdump wheel; None when absent."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    nvcc = find_nvcc()
    beside = [Path(nvcc).resolve().parent / "cuobjdump"] if nvcc else []
    wheels = [Path(site) / "nvidia" / sub / "bin" / "cuobjdump" for site in sys.path if site
              for sub in CUOBJDUMP_WHEEL_DIRS]
    return next((str(p) for p in [*beside, Path("/usr/local/cuda/bin/cuobjdump"), *wheels] if p.is_file()), None)


@dataclass(frozen=True)
class Instr:
    """One SASS instruction: its address, the guard predicate if any, the opcode with modifiers, the operands."""

    addr: int
    guard: str
    opcode: str
    operands: str

    @property
    def base(self) -> str:
        """The opcode without modifiers (LDS for LDS.128)."""
        return self.opcode.split(".", 1)[0]


def parse_sass(text: str) -> dict[str, list[Instr]]:
    """cuobjdump -sass output: mangled function name -> instructions."""
    out: dict[str, list[Instr]] = {}
    current: list[Instr] | None = None
    for line in text.splitlines():
        if m := _FUNCTION.match(line):
            current = out.setdefault(m.group(1), [])
        elif current is not None and (m := _LINE.match(line)):
            body = m.group(2).strip()
            guard = ""
            if body.startswith("@"):
                guard, body = body.split(None, 1)
            opcode, _, operands = body.partition(" ")
            current.append(Instr(int(m.group(1), 16), guard, opcode, operands.strip()))
    return out


def compile_sass(source: str, include_dirs: Sequence[str] = (), arch: str = DEFAULT_ARCH,
                 extra: Sequence[str] = ()) -> tuple[dict[str, list[Instr]], str]:
    """Compile a source text to a cubin with nvcc (ptxas -v) and disassemble it: (functions, ptxas log)."""
    dump = find_cuobjdump()
    if find_nvcc() is None or dump is None:
        raise RuntimeError("needs nvcc and cuobjdump (pip install nvidia-cuda-nvcc nvidia-cuda-cuobjdump)")
    with tempfile.TemporaryDirectory(prefix="rt-sass-") as tmp:
        cu, cubin = Path(tmp) / "m.cu", Path(tmp) / "m.cubin"
        cu.write_text(source)
        cmd = nvcc_command(cu, cubin, arch, "--cubin", include_dirs, extra, ptxas_verbose=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if proc.returncode:
            raise RuntimeError(f"nvcc failed: {proc.stderr.strip().splitlines()[-1:]}")
        sass = subprocess.run([dump, "-sass", str(cubin)], capture_output=True, text=True, timeout=300, check=True)
    return parse_sass(sass.stdout), proc.stdout + proc.stderr


def find_function(functions: dict[str, list[Instr]], name: str) -> list[Instr]:
    """The one function whose mangled name contains `name` (KeyError naming the matches otherwise)."""
    hits = [k for k in functions if name in k]
    if len(hits) != 1:
        raise KeyError(f"{len(hits)} functions match '{name}': {hits[:4]}")
    return functions[hits[0]]


def loop_spans(code: list[Instr]) -> list[tuple[int, int]]:
    """(first, last) address of every backward branch's body, nested loops included."""
    spans = []
    for ins in code:
        m = _TARGET.search(ins.operands) if ins.base == "BRA" else None
        if m and int(m.group(1), 16) < ins.addr:  # a branch to itself ends the function (the trap after EXIT)
            spans.append((int(m.group(1), 16), ins.addr))
    return spans


def loops(code: list[Instr]) -> list[list[Instr]]:
    """The body of every loop (a backward branch's target .. the branch), nested loops included."""
    return [[i for i in code if lo <= i.addr <= hi] for lo, hi in loop_spans(code)]


@dataclass(frozen=True)
class LoopFigures:
    """What one loop body issues: all instructions (alignment NOPs too: they take issue slots), HMMA, FFMA, wide
    loads (LDG/LDS.128, LDSM, LDGSTS), 128-bit and other shared loads, global (LDG) and generic (LD) loads."""

    instructions: int
    hmma: int
    ffma: int
    wide_loads: int
    lds128: int
    lds_other: int
    global_loads: int
    generic_loads: int

    @property
    def math_share(self) -> float:
        """(HMMA + FFMA) / instructions: the ceiling of the loop as a share of the math pipes' peak."""
        return (self.hmma + self.ffma) / self.instructions if self.instructions else 0.0

    @property
    def per_ffma(self) -> float:
        """Instructions issued per FFMA."""
        return self.instructions / max(1, self.ffma)


def _is_wide_load(ins: Instr) -> bool:
    """128-bit loads, ldmatrix and cp.async copies."""
    return (ins.base in ("LDG", "LDS", "LD") and ".128" in ins.opcode) or ins.base in ("LDSM", "LDGSTS")


def loop_figures(body: list[Instr]) -> LoopFigures:
    """Count one loop body's instructions by kind."""
    lds = [i for i in body if i.base == "LDS"]
    return LoopFigures(len(body), sum(i.base == "HMMA" for i in body), sum(i.base == "FFMA" for i in body),
                       sum(_is_wide_load(i) for i in body), sum(".128" in i.opcode for i in lds),
                       sum(".128" not in i.opcode for i in lds), sum(i.base == "LDG" for i in body),
                       sum(i.base == "LD" for i in body))


def _math(body: list[Instr]) -> int:
    """Multiply-add work in FFMA units: an HMMA.1684 does 16x the multiply-adds of a warp's FFMA."""
    return sum(16 if i.base == "HMMA" else 1 for i in body if i.base in ("HMMA", "FFMA"))


def hottest_loop(code: list[Instr]) -> LoopFigures | None:
    """The figures of the loop that itself (its nested loops aside) issues the most math, the smallest on a tie:
    a kernel's inner product loop, not the loop around it nor a wait loop inside it; None without loops."""
    spans = loop_spans(code)
    if not spans:
        return None

    def own_math(span: tuple[int, int]) -> int:
        inner = [s for s in spans if s != span and span[0] <= s[0] and s[1] <= span[1]]
        return _math([i for i in code if span[0] <= i.addr <= span[1]
                      and not any(lo <= i.addr <= hi for lo, hi in inner)])

    hot = max(spans, key=lambda s: (own_math(s), -(s[1] - s[0])))
    return loop_figures([i for i in code if hot[0] <= i.addr <= hot[1]])


@dataclass
class FunctionFigures:
    """What one kernel's SASS and ptxas report say."""

    name: str
    instructions: int
    hmma: int
    loop: LoopFigures | None
    registers: int | None = None
    spill_bytes: int | None = None


def demangle(sym: str) -> str:
    """`kernel<template arguments>` of a kernel symbol."""
    name, targs = demangle_entry(sym)
    return f"{name}<{targs}>" if targs else name


def function_figures(name: str, code: list[Instr]) -> FunctionFigures:
    """Figures of one function: its size, its HMMA, its hottest loop."""
    return FunctionFigures(name, len(code), sum(i.base == "HMMA" for i in code), hottest_loop(code))


def compile_figures(source: Path, include_dirs: Sequence[str], arch: str = DEFAULT_ARCH) -> list[FunctionFigures]:
    """Compile a .cu file to a cubin and return the figures of every function in it."""
    functions, log = compile_sass(source.read_text(), [*include_dirs, str(source.parent)], arch)
    resources = parse_ptxas(log)
    figures = []
    for name, code in functions.items():
        f = function_figures(name, code)
        if name in resources:
            used = resources[name]
            f.registers, f.spill_bytes = used["registers"], used["spill_stores"] + used["spill_loads"]
        figures.append(f)
    return figures


def format_row(f: FunctionFigures) -> str:
    """One line: name, size, registers, spills, HMMA in all, the hot loop's mix."""
    loop = f.loop
    mix = (f"loop {loop.instructions} instr: HMMA {loop.hmma}, FFMA {loop.ffma}, 128-bit loads {loop.wide_loads}, "
           f"math share {100 * loop.math_share:.1f}%") if loop else "no loop"
    return (f"{demangle(f.name)[:90]:90s} {f.instructions:6d} instr, {f.registers} regs, {f.spill_bytes} B spilled, "
            f"HMMA {f.hmma}; {mix}")


def format_listing(code: list[Instr]) -> list[str]:
    """One function's SASS, a line per instruction: address, guard, instruction."""
    return [f"{i.addr:05x}  {i.guard + ' ' if i.guard else ''}{i.opcode} {i.operands}".rstrip() for i in code]


def main(argv: list[str] | None = None) -> int:
    """CLI: the figures of every function of one .cu file whose demangled name contains --match, or (--listing) one
    function's SASS with its hottest loop's figures."""
    ap = argparse.ArgumentParser(prog="python3 -m toolchain.sass", description=(__doc__ or "").splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("-I", dest="include", action="append", default=[])
    ap.add_argument("--arch", default=DEFAULT_ARCH)
    ap.add_argument("--match", default="")
    ap.add_argument("--listing", metavar="NAME", help="print the SASS of the function whose mangled name holds NAME")
    args = ap.parse_args(argv)
    try:
        if args.listing:
            functions, _ = compile_sass(args.source.read_text(), [*args.include, str(args.source.parent)], args.arch)
            code = find_function(functions, args.listing)
            print("\n".join(format_listing(code)))
            print(f"# hottest loop: {hottest_loop(code)}", file=sys.stderr)
            return 0
        figures = compile_figures(args.source, args.include, args.arch)
    except (OSError, RuntimeError, KeyError, subprocess.SubprocessError) as exc:
        print(f"{args.source}: error: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 1
    for f in sorted(figures, key=lambda f: demangle(f.name)):
        if args.match in demangle(f.name):
            print(format_row(f))
    return 0


if __name__ == "__main__":
    sys.exit(main())
