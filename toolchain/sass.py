"""Static SASS figures of compiled kernels (no GPU needed): per function, the instruction mix of its inner loop
(tensor-core HMMA, FP32 FFMA, 128-bit loads) and ptxas's registers and spills.

`python3 -m toolchain.sass FILE.cu [-I DIR ...] [--arch sm_90] [--match NAME]` compiles FILE with nvcc to a cubin,
disassembles it with cuobjdump (the nvidia-cuda-cuobjdump wheel, extra `sass`) and prints one line per function.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from toolchain.demangle import demangle_entry
from toolchain.nvcc import find_nvcc

_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")
_BRANCH = re.compile(r"0x([0-9a-f]+)")
_PTXAS_FUNC = re.compile(r"Compiling entry function '(\S+)'|Function properties for (\S+)")
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_REGS = re.compile(r"Used (\d+) registers")


@dataclass(frozen=True)
class Instr:
    """One SASS instruction: address, opcode with modifiers, operands."""

    addr: int
    op: str
    operands: str


@dataclass
class LoopFigures:
    """The instruction mix of one loop body."""

    instructions: int
    hmma: int
    ffma: int
    wide_loads: int   # LDG.128 / LDS.128 / LDSM / LDGSTS (cp.async)

    @property
    def math_share(self) -> float:
        """(HMMA + FFMA) / instructions: the ceiling of the loop as a share of the math pipes' peak."""
        return (self.hmma + self.ffma) / self.instructions if self.instructions else 0.0


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


def find_cuobjdump() -> str | None:
    """cuobjdump on PATH, else the one the nvidia-cuda-cuobjdump wheel installs."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    for sub in ("cu13", "cuda_cuobjdump", "cu12"):
        path = Path(sysconfig.get_paths()["purelib"], "nvidia", sub, "bin", "cuobjdump")
        if path.exists():
            return str(path)
    return None


def _is_wide_load(op: str) -> bool:
    """128-bit loads, ldmatrix and cp.async copies."""
    return (op.startswith(("LDG", "LDS", "LD.")) and ".128" in op) or op.startswith(("LDSM", "LDGSTS"))


def parse_sass(text: str) -> dict[str, list[Instr]]:
    """cuobjdump -sass output -> instructions per (mangled) function name."""
    funcs: dict[str, list[Instr]] = {}
    current: list[Instr] | None = None
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            current = funcs.setdefault(m.group(1), [])
            continue
        i = _INSTR.search(line)
        if i and current is not None:
            current.append(Instr(int(i.group(1), 16), i.group(3), i.group(4)))
    return funcs


def loops(instrs: list[Instr]) -> list[list[Instr]]:
    """Bodies of the backward branches: the loops of the function, nested ones included."""
    found = []
    for k, ins in enumerate(instrs):
        m = _BRANCH.search(ins.operands) if ins.op.startswith("BRA") else None
        if m and int(m.group(1), 16) < ins.addr:
            found.append([x for x in instrs[: k + 1] if x.addr >= int(m.group(1), 16)])
    return found


def loop_figures(body: list[Instr]) -> LoopFigures:
    """Count one loop body's instructions by kind."""
    return LoopFigures(len(body), sum(x.op.startswith("HMMA") for x in body),
                       sum(x.op.startswith("FFMA") for x in body), sum(_is_wide_load(x.op) for x in body))


def function_figures(name: str, instrs: list[Instr]) -> FunctionFigures:
    """Figures of one function: the smallest loop holding the most math stands for its inner loop (an HMMA.1684 does
    16x the multiply-adds of a warp's FFMA)."""
    figures = [loop_figures(b) for b in loops(instrs)]
    hot = max(figures, key=lambda f: (16 * f.hmma + f.ffma, -f.instructions), default=None)
    return FunctionFigures(name, len(instrs), sum(x.op.startswith("HMMA") for x in instrs), hot)


def ptxas_resources(log: str) -> dict[str, tuple[int, int]]:
    """(registers, spill bytes) per mangled function name from `-Xptxas -v` output."""
    out: dict[str, tuple[int, int]] = {}
    name, spills = None, 0
    for line in log.splitlines():
        m = _PTXAS_FUNC.search(line)
        if m:
            name = m.group(1) or m.group(2)
        s = _SPILLS.search(line)
        if s:
            spills = int(s.group(1)) + int(s.group(2))
        r = _REGS.search(line)
        if r and name:
            out[name] = (int(r.group(1)), spills)
    return out


def compile_figures(source: Path, include_dirs: list[str], arch: str = "sm_90") -> list[FunctionFigures]:
    """Compile `source` to a cubin and return the figures of every function in it."""
    nvcc, cuobjdump = find_nvcc(), find_cuobjdump()
    if nvcc is None or cuobjdump is None:
        raise RuntimeError("needs nvcc and cuobjdump (pip install nvidia-cuda-nvcc nvidia-cuda-cuobjdump)")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp, "out.cubin")
        cmd = [nvcc, f"-arch={arch}", "-std=c++17", "-cubin", "-Xptxas", "-v", "-o", str(cubin),
               *(f"-I{d}" for d in include_dirs), "-I", str(source.parent), str(source)]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if res.returncode:
            raise RuntimeError(f"{source}: nvcc failed: {res.stderr.strip().splitlines()[-1:]}")
        sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, timeout=300,
                              check=True).stdout
    resources = ptxas_resources(res.stderr)
    figures = []
    for name, instrs in parse_sass(sass).items():
        f = function_figures(name, instrs)
        f.registers, f.spill_bytes = resources.get(name, (None, None))
        figures.append(f)
    return figures


def format_row(f: FunctionFigures) -> str:
    """One line: name, size, registers, spills, HMMA in all, the hot loop's mix."""
    loop = f.loop
    mix = (f"loop {loop.instructions} instr: HMMA {loop.hmma}, FFMA {loop.ffma}, 128-bit loads {loop.wide_loads}, "
           f"math share {100 * loop.math_share:.1f}%") if loop else "no loop"
    return (f"{demangle(f.name)[:90]:90s} {f.instructions:6d} instr, {f.registers} regs, {f.spill_bytes} B spilled, "
            f"HMMA {f.hmma}; {mix}")


def main(argv: list[str] | None = None) -> int:
    """CLI: print the figures of every function of one .cu file whose demangled name contains --match."""
    ap = argparse.ArgumentParser(prog="python3 -m toolchain.sass", description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("-I", dest="include", action="append", default=[])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--match", default="")
    args = ap.parse_args(argv)
    try:
        figures = compile_figures(args.source, args.include, args.arch)
    except (RuntimeError, subprocess.SubprocessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for f in sorted(figures, key=lambda f: demangle(f.name)):
        if args.match in demangle(f.name):
            print(format_row(f))
    return 0


if __name__ == "__main__":
    sys.exit(main())
