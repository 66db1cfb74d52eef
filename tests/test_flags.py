"""-I, -D, -include, --std and -p BUILD_DIR (compile_commands.json) on convert, run, verify and convert-all: a
small CMake-style project whose kernel needs its include folder, a macro and a forced include."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from converter.flags import CompileFlags, flags_from_args, load_database
from rtransform.run import run_file

REPO = Path(__file__).resolve().parent.parent

KERNEL = """#include "tiles.h"

__global__ void scale_tiles(float *out, const float *in, int n) {
  int i = blockIdx.x * TILE + threadIdx.x;
  if (i < n) out[i] = TILE_SCALE(in[i]) + forced_bias();
}
"""
SPEC = """kernel: scale_tiles
grid: [3]
block: [{tile}]
args:
- {{name: out, kind: buffer, dtype: float32, size: {size}, init: zeros}}
- {{name: in, kind: buffer, dtype: float32, size: {size}, init: random}}
- {{name: n, kind: scalar, dtype: int32, value: {n}}}
outputs: [out]
"""


def project(root: Path, tile: int = 32) -> dict[str, Path]:
    """src/k.cu, include/tiles.h (needs -I and -DTILE), cmake/forced.h (-include), build/compile_commands.json."""
    for d in ("src", "include", "cmake", "build"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "include" / "tiles.h").write_text("#pragma once\n#ifndef TILE\n#error TILE must be defined\n#endif\n"
                                              "#define TILE_SCALE(v) ((v) * (float)TILE)\n")
    (root / "cmake" / "forced.h").write_text("#pragma once\n__device__ inline float forced_bias() { return 0.5f; }\n")
    (root / "src" / "k.cu").write_text(KERNEL)
    size = 3 * tile
    (root / "src" / "k.spec.yaml").write_text(SPEC.format(tile=tile, size=size, n=size - 5))
    cmd = (f"/usr/local/cuda/bin/nvcc -I{root / 'include'} -DTILE={tile} -include ../cmake/forced.h -std=c++17 "
           f"-o CMakeFiles/k.dir/src/k.cu.o -c {root / 'src' / 'k.cu'}")
    (root / "build" / "compile_commands.json").write_text(json.dumps(
        [{"directory": str(root / "build"), "command": cmd, "file": str(root / "src" / "k.cu")}], indent=2))
    return {"cu": root / "src" / "k.cu", "spec": root / "src" / "k.spec.yaml", "build": root / "build"}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rtransform.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO)


def _want(res) -> np.ndarray:
    out = res.inputs["out"].copy()
    n = int(res.inputs["n"])
    tile = res.spec.block[0]
    out[:n] = res.inputs["in"][:n] * np.float32(tile) + np.float32(0.5)
    return out


def test_compile_commands_entry_is_parsed(tmp_path):
    p = project(tmp_path)
    f = load_database(str(p["build"])).flags_for(str(p["cu"]))
    assert f == CompileFlags((str(tmp_path / "include"),), ("TILE=32",), (str(tmp_path / "cmake" / "forced.h"),),
                             "c++17")
    g = flags_from_args(["nvcc", "--include-path=inc", "--define-macro", "A=1", "-std", "c++20", "x.cu"], "/w")
    assert g == CompileFlags(("/w/inc",), ("A=1",), (), "c++20")


def test_convert_needs_the_flags_and_takes_them_from_the_command_line_or_the_database(tmp_path):
    p = project(tmp_path)
    out = tmp_path / "k.rtask.cu"
    bare = cli("convert", str(p["cu"]), "-o", str(out))
    assert bare.returncode == 1 and not out.exists() and "Traceback" not in bare.stderr
    flags = ["-I", str(tmp_path / "include"), "-D", "TILE=32", "-include", str(tmp_path / "cmake" / "forced.h")]
    by_flags = cli("convert", str(p["cu"]), "-o", str(out), *flags)
    assert by_flags.returncode == 0, by_flags.stderr
    text = out.read_text()
    out.unlink()
    by_db = cli("convert", str(p["cu"]), "-o", str(out), "-p", str(p["build"]))
    assert by_db.returncode == 0, by_db.stderr
    assert out.read_text() == text and "scale_tiles__rtask" in text


@pytest.mark.parametrize("tile", [32, 48])
def test_run_and_verify_with_the_database(tmp_path, tile):
    """The legacy kernel matches numpy with the database's flags, and its rKernel verifies with them."""
    p = project(tmp_path, tile)
    f = load_database(str(p["build"])).flags_for(str(p["cu"]))
    res = run_file(str(p["cu"]), str(p["spec"]), flags=f)
    np.testing.assert_allclose(res.outputs["out"], _want(res), rtol=1e-6)
    r = cli("verify", str(p["cu"]), "--spec", str(p["spec"]), "-p", str(p["build"]))
    assert r.returncode == 0 and "verified" in r.stdout, r.stdout + r.stderr


def test_convert_all_with_the_database(tmp_path):
    p = project(tmp_path)
    r = cli("convert-all", str(tmp_path / "src"), "-o", str(tmp_path / "out"), "-p", str(p["build"]), "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert [f["status"] for f in report["files"]] == ["converted"]
    bare = cli("convert-all", str(tmp_path / "src"), "-o", str(tmp_path / "out2"), "--json")
    assert json.loads(bare.stdout)["files"][0]["status"] != "converted"


def test_std_reaches_the_parse(tmp_path):
    """A kernel that needs C++20 converts with --std c++20 and is refused at the C++17 default."""
    src = tmp_path / "k20.cu"
    src.write_text("__global__ void fill(int *o) {\n  static_assert(__cplusplus >= 202002L, \"C++20\");\n"
                   "  o[threadIdx.x] = 4;\n}\n")
    assert cli("convert", str(src), "-o", "-").returncode == 1
    r = cli("convert", str(src), "-o", "-", "--std", "c++20")
    assert r.returncode == 0 and "fill__rtask" in r.stdout


def test_missing_database_entry_is_one_line(tmp_path):
    p = project(tmp_path)
    other = tmp_path / "src" / "other.cu"
    other.write_text(KERNEL)
    r = cli("convert", str(other), "-o", "-", "-p", str(p["build"]))
    assert r.returncode == 2 and r.stderr.strip() == (f"{other}: error: not listed in "
                                                      f"{p['build'] / 'compile_commands.json'} (compile it in the "
                                                      "build, or pass -I/-D)")
