"""ptxas resource figures: run `nvcc -Xptxas -v` on a source and parse registers, spills and shared memory."""
from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

from .nvcc import DEFAULT_ARCH as RESOURCE_ARCH
from .nvcc import nvcc_command

NVCC_TIMEOUT_S = 240

_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(text: str) -> dict[str, dict]:
    """Resources per entry function (mangled name) from `ptxas -v` output."""
    entries: dict[str, dict] = {}
    current: dict | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current = entries.setdefault(m.group(1), {"registers": None, "spill_stores": 0, "spill_loads": 0,
                                                      "stack_frame": 0, "static_smem_bytes": 0})
        elif m := _PROPS.search(line):
            current = entries.get(m.group(1))  # properties of a non-entry function: ignored
        elif current is not None and (m := _FRAME.search(line)):
            current.update(stack_frame=int(m.group(1)), spill_stores=int(m.group(2)),
                           spill_loads=int(m.group(3)))
        elif current is not None and (m := _USED.search(line)):
            current["registers"] = int(m.group(1))
            if s := _SMEM.search(line):
                current["static_smem_bytes"] = int(s.group(1))
    return entries


def _one_line(text: str) -> str:
    """First non-empty line, stripped."""
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def run_ptxas(source: str, nvcc: str, include_dirs: list[str], arch: str = RESOURCE_ARCH) -> tuple[bool, str]:
    """Device-compile a source with `-Xptxas -v`; (True, ptxas log) or (False, first error line)."""
    with tempfile.TemporaryDirectory(prefix="rt-resources-") as tmp:
        cu = Path(tmp) / "rkernels.cu"
        cu.write_text(source)
        cmd = nvcc_command(cu, Path(tmp) / "rkernels.cubin", arch, "--cubin", include_dirs, ptxas_verbose=True,
                           nvcc=nvcc)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return False, f"timeout after {NVCC_TIMEOUT_S} s"
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        errors = [ln for ln in log.splitlines() if "error" in ln]
        return False, _one_line(errors[0] if errors else log or f"exit {proc.returncode}")
    return True, log
