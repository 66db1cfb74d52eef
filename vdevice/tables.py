"""The interpreter's device tables, described once: each record type is a list of named uint32 fields from which
Python packs the rows (codegen.encode) and the C struct the interpreter reads them through is generated
(codegen.generate emits it ahead of vdevice_runtime.cuh). Host and device share these names; no code anywhere
indexes a table by a column number."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class Record:
    """One table row type: a C struct of uint32 fields, in this order."""

    c_name: str
    fields: tuple[tuple[str, str], ...]  # (field name, what it holds)
    align: int = 4  # the C struct's alignment: 16 lets the device fetch a row with 128-bit loads

    @property
    def names(self) -> tuple[str, ...]:
        """Field names in order."""
        return tuple(name for name, _ in self.fields)

    def column(self, name: str) -> int:
        """Position of a field (for numpy views of a packed table)."""
        return self.names.index(name)

    def c_struct(self) -> str:
        """The C++ declaration the device reads the table through (4-byte fields, no padding)."""
        body = "\n".join(f"  unsigned {name};  // {about}" for name, about in self.fields)
        size = 4 * len(self.fields)
        check = f'static_assert(sizeof({self.c_name}) == {size}, "{self.c_name}: packed uint32 fields");'
        align = f"alignas({self.align}) " if self.align > 4 else ""
        return f"struct {align}{self.c_name} {{\n{body}\n}};\n{check}"

    def pack(self, rows: Sequence[Mapping[str, int]]) -> np.ndarray:
        """uint32 table [rows, fields] (at least one row: never a zero-size device allocation); a row names every
        field except `pad*` ones, which are zero."""
        out = np.zeros((max(1, len(rows)), len(self.fields)), dtype=np.uint32)
        for i, row in enumerate(rows):
            extra = set(row) - set(self.names)
            if extra:
                raise KeyError(f"{self.c_name} has no field(s) {', '.join(sorted(extra))}")
            out[i] = [int(row.get(name, 0)) if name.startswith("pad") else int(row[name]) for name in self.names]
        return out


INSTR = Record("Instr", (
    ("code", "VD_WAIT, or the rKernel instantiation id (the dispatch switch's case) | VD_NAMED | VD_PREPARE | "
             "VD_RESIDENT | (gang size - 1) << VD_GANG_SHIFT | resident region << VD_HOME_SHIFT"),
    ("a", "run: rTask id; wait: first target"),
    ("b", "run: first argument slot in argtab; wait: target count"),
    ("publish", "run: 1 + the counter this rTask increments when finished; 0 when no barrier-rTask awaits it"),
    ("grid_x", "run: legacy grid x; wait: its first target's counter (no dependent load for one counter)"),
    ("grid_yz", "run: legacy grid y | grid z << 16; wait: its first target's count"),
    ("block", "run: legacy block x | block y << 11 | block z << 22; wait: the first argument slot of the run after "
              "it (prefetched while it polls)"),
    ("layout_offset", "the layout struct's offset in the vEU's dynamic buffer: align16(dynamic shared bytes)"),
), align=16)
TARGET = Record("Target", (
    ("counter", "the awaited counter"),
    ("count", "rTasks that increment it per run: wait until counters[counter] >= (run + 1) * count"),
))
RECORDS = (INSTR, TARGET)

# bits of Instr.code (the instantiation id is below them)
VD_WAIT = 0xFFFFFFFF
VD_NAMED = 1 << 31  # the rTask spans whole warps and never exits early: its barrier is bar.sync with a count
VD_PREPARE = 1 << 30  # thread 0 sets up the vEU's TaskSlot (mbarrier, reduction slots) before the rTask runs
VD_RESIDENT = 1 << 29  # the rTask's resident operand slice is in the vEU's resident region (__rt.resident)
VD_GANG_SHIFT = 25  # bits 25-28 of a run's code: (rTasks side by side) - 1, this one and the records after it
VD_GANG_MAX = 15  # named barriers 1..15, one per rTask of a gang
VD_HOME_SHIFT = 16  # bits 16-24: which of the vEU's resident regions a resident rTask uses (folded programs)
VD_HOME_MAX = (1 << (VD_GANG_SHIFT - VD_HOME_SHIFT)) - 1
VD_KERNEL_MASK = (1 << VD_HOME_SHIFT) - 1
GRID_YZ_BITS, BLOCK_BITS = 16, 11


def pack_grid_yz(y: int, z: int) -> int:
    """grid y and z in one word (each below 65536, CUDA's own limit)."""
    if not (0 < y < 1 << GRID_YZ_BITS and 0 < z < 1 << GRID_YZ_BITS):
        raise ValueError(f"grid y, z = {y}, {z}: CUDA allows 1..65535")
    return y | z << GRID_YZ_BITS


def pack_block(x: int, y: int, z: int) -> int:
    """block x, y, z in one word (x, y <= 1024, z <= 64)."""
    if not (0 < x <= 1024 and 0 < y <= 1024 and 0 < z <= 64):
        raise ValueError(f"block {x}, {y}, {z}: CUDA allows x, y <= 1024 and z <= 64")
    return x | y << BLOCK_BITS | z << 2 * BLOCK_BITS


def c_declarations() -> str:
    """Every record struct and the code bits, in namespace vd, for the generated translation unit."""
    structs = "\n".join(r.c_struct() for r in RECORDS)
    consts = (f"enum : unsigned {{ VD_WAIT = 0x{VD_WAIT:X}u, VD_NAMED = 0x{VD_NAMED:X}u, "
              f"VD_PREPARE = 0x{VD_PREPARE:X}u, VD_RESIDENT = 0x{VD_RESIDENT:X}u, "
              f"VD_KERNEL_MASK = 0x{VD_KERNEL_MASK:X}u, VD_GANG_SHIFT = {VD_GANG_SHIFT}u, "
              f"VD_HOME_SHIFT = {VD_HOME_SHIFT}u, VD_HOME_MASK = 0x{VD_HOME_MAX:X}u, "
              f"VD_GRID_YZ_BITS = {GRID_YZ_BITS}u, "
              f"VD_BLOCK_BITS = {BLOCK_BITS}u }};")
    return ("// the interpreter's table records, generated by vdevice/tables.py\n"
            f"namespace vd {{\n{structs}\n{consts}\n}}  // namespace vd\n#define VD_RECORDS_DEFINED 1")
