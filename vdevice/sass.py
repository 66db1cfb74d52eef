"""SASS of generated modules and legacy kernels (cuobjdump from the nvidia-cuda-cuobjdump wheel or a CUDA
toolkit): the instructions of one function, its loops, and the figures the loop comparison reads (FFMA, 128-bit
shared loads, global against generic loads, spills)."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

_LINE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_FUNCTION = re.compile(r"Function : (\S+)")
_TARGET = re.compile(r"\bBRA\b.*?(0x[0-9a-f]+)")


def find_cuobjdump() -> str | None:
    """cuobjdump on the PATH, in a CUDA toolkit, or in the nvidia-cuda-cuobjdump wheel; None when absent."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    for base in [*sys.path, "/usr/local/cuda"]:
        for rel in ("nvidia/cu13/bin/cuobjdump", "nvidia/cuda_cuobjdump/bin/cuobjdump", "bin/cuobjdump"):
            path = Path(base) / rel
            if path.is_file():
                return str(path)
    return None


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


def parse(text: str) -> dict[str, list[Instr]]:
    """cuobjdump -sass output: mangled function name -> instructions."""
    out: dict[str, list[Instr]] = {}
    current: list[Instr] | None = None
    for line in text.splitlines():
        if m := _FUNCTION.search(line):
            current = out.setdefault(m.group(1), [])
        elif current is not None and (m := _LINE.match(line)):
            body = m.group(2).strip()
            guard = ""
            if body.startswith("@"):
                guard, body = body.split(None, 1)
            opcode, _, operands = body.partition(" ")
            current.append(Instr(int(m.group(1), 16), guard, opcode, operands.strip()))
    return out


def compile_sass(source: str, include_dirs: list[str] | tuple[str, ...] = (), arch: str = "sm_90",
                 extra: tuple[str, ...] = ()) -> tuple[dict[str, list[Instr]], str]:
    """Compile a source to a cubin with nvcc (ptxas -v) and disassemble it: (functions, ptxas log)."""
    from toolchain.nvcc import find_nvcc
    nvcc, dump = find_nvcc(), find_cuobjdump()
    if nvcc is None or dump is None:
        raise RuntimeError("nvcc or cuobjdump not found")
    with tempfile.TemporaryDirectory(prefix="rt-sass-") as tmp:
        cu, cubin = Path(tmp) / "m.cu", Path(tmp) / "m.cubin"
        cu.write_text(source)
        cmd = [nvcc, f"-arch={arch}", "-std=c++17", "--cubin", "-Xptxas", "-v", *extra,
               *(f"-I{d}" for d in include_dirs), "-o", str(cubin), str(cu)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode:
            raise RuntimeError(f"nvcc failed: {proc.stderr.strip().splitlines()[-1:]}")
        sass = subprocess.run([dump, "-sass", str(cubin)], capture_output=True, text=True, timeout=300, check=True)
    return parse(sass.stdout), proc.stdout + proc.stderr


def function(functions: dict[str, list[Instr]], name: str) -> list[Instr]:
    """The one function whose mangled name contains `name`."""
    hits = [k for k in functions if name in k]
    if len(hits) != 1:
        raise KeyError(f"{len(hits)} functions match '{name}': {hits[:4]}")
    return functions[hits[0]]


def loops(code: list[Instr]) -> list[list[Instr]]:
    """Every backward branch's body (target .. branch), innermost first (no other loop inside)."""
    spans = []
    for ins in code:
        m = _TARGET.search(f"{ins.opcode} {ins.operands}")
        if ins.base == "BRA" and m and int(m.group(1), 16) <= ins.addr:
            spans.append((int(m.group(1), 16), ins.addr))
    inner = [s for s in spans if not any(o != s and s[0] <= o[0] and o[1] <= s[1] for o in spans)]
    return [[i for i in code if lo <= i.addr <= hi] for lo, hi in inner]


@dataclass(frozen=True)
class LoopFigures:
    """What one loop issues: all instructions, FFMA, 128-bit shared loads, other shared loads, global and generic
    loads."""

    instructions: int
    ffma: int
    lds128: int
    lds_other: int
    global_loads: int
    generic_loads: int

    @property
    def per_ffma(self) -> float:
        """Instructions issued per FFMA."""
        return self.instructions / max(1, self.ffma)


def figures(loop: list[Instr]) -> LoopFigures:
    """Count a loop's instructions by kind."""
    real = [i for i in loop if i.base != "NOP"]
    lds = [i for i in real if i.base == "LDS"]
    return LoopFigures(len(real), sum(i.base == "FFMA" for i in real), sum(".128" in i.opcode for i in lds),
                       sum(".128" not in i.opcode for i in lds), sum(i.base == "LDG" for i in real),
                       sum(i.base == "LD" for i in real))


def hottest_loop(code: list[Instr]) -> LoopFigures:
    """The innermost loop with the most FFMA (a kernel's inner product loop)."""
    candidates = [figures(body) for body in loops(code)]
    if not candidates:
        raise ValueError("no loop in this function")
    return max(candidates, key=lambda f: (f.ffma, -f.instructions))


def main(argv: list[str] | None = None) -> int:
    """`python -m vdevice.sass FILE.cu [-I DIR]... [--function NAME]`: compile for sm_90, print one function's
    SASS (address, guard, instruction) and its hottest loop's figures."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m vdevice.sass", description=main.__doc__)
    parser.add_argument("source", type=Path)
    parser.add_argument("-I", dest="include", action="append", default=[])
    parser.add_argument("--function", default="vd_interpreter")
    args = parser.parse_args(argv)
    try:
        functions, _ = compile_sass(args.source.read_text(), [str(args.source.parent), *args.include])
        code = function(functions, args.function)
    except (OSError, RuntimeError, KeyError) as exc:
        print(f"{args.source}: error: {exc}", file=sys.stderr)
        return 1
    for i in code:
        print(f"{i.addr:05x}  {i.guard + ' ' if i.guard else ''}{i.opcode} {i.operands}".rstrip())
    try:
        print(f"# hottest loop: {hottest_loop(code)}", file=sys.stderr)
    except ValueError:
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
