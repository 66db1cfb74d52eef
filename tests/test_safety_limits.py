"""Issue 30, sixth family: bounded resources and one-line errors. Non-regular files (a FIFO #included or given as
any input, /dev/zero as a spec) are refused before they are read; YAML alias bombs, macro bombs and npz members
that inflate are refused before they cost memory; a kernel's printf stops at the GPU's 1 MB; every timeout and
RAMMER_* variable is validated; the odd inputs that gave tracebacks give one line naming the input."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
KERNEL = "__global__ void k(float* a) { a[threadIdx.x] = 1.0f; }\n"
SPEC = "kernel: k\ngrid: [1]\nblock: [4]\nargs:\n  - {name: a, kind: buffer, dtype: float32, size: 4}\noutputs: [a]\n"


def cli(tool: str, *args: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """The command as a user runs it; a hang fails the test (subprocess timeout) instead of hanging the suite."""
    return subprocess.run([sys.executable, "-c", f"from {tool}.cli import main; main()", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else dict(os.environ, **env))


def one_line(res: subprocess.CompletedProcess, *needles: str) -> str:
    assert res.returncode != 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and not ln.startswith(
        ("  ", "Usage: ", "Try '", "note: ", "rammer build "))]
    assert len(lines) == 1, res.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "k.cu").write_text(KERNEL)
    (tmp_path / "k.yaml").write_text(SPEC)
    return tmp_path


# ---- non-regular files -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["convert", "run", "verify", "spec"])
def test_an_include_of_a_fifo_is_refused_not_waited_on(files: Path, command: str) -> None:
    os.mkfifo(files / "pipe.h")
    (files / "p.cu").write_text('#include "pipe.h"\n' + KERNEL)
    args = {"convert": ["convert", str(files / "p.cu"), "-o", str(files / "o.cu")],
            "run": ["run", str(files / "p.cu"), "--spec", str(files / "k.yaml")],
            "verify": ["verify", str(files / "p.cu"), "--spec", str(files / "k.yaml")],
            "spec": ["spec", str(files / "p.cu"), "--kernel", "k"]}[command]
    one_line(cli("rtransform", *args, timeout=120), "pipe.h", "not a regular file")


@pytest.mark.parametrize("what", ["source", "spec", "spec-dev-zero", "force-include", "compile-db"])
def test_non_regular_inputs_are_refused(files: Path, what: str) -> None:
    os.mkfifo(files / "fifo")
    src, spec = str(files / "k.cu"), str(files / "k.yaml")
    args = {"source": ["run", str(files / "fifo"), "--spec", spec],
            "spec": ["run", src, "--spec", str(files / "fifo")],
            "spec-dev-zero": ["run", src, "--spec", "/dev/zero"],
            "force-include": ["convert", src, "-include", str(files / "fifo"), "-o", str(files / "o.cu")],
            "compile-db": ["convert", src, "-p", str(files / "fifo"), "-o", str(files / "o.cu")]}[what]
    one_line(cli("rtransform", *args, timeout=120), "not a regular file" if what != "spec-dev-zero" else "device")


def test_a_fifo_as_model_or_inputs_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "m.onnx")
    one_line(cli("rammer", "build", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "b"), "--target", "cpu",
                 timeout=120), "FIFO")
    one_line(cli("rammer", "plan", str(tmp_path / "m.onnx"), timeout=120))


# ---- sizes --------------------------------------------------------------------------------------------------------
BOMB = ('a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' +
        "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")) +
        "kernel: *i\n")


def test_a_yaml_alias_bomb_is_refused_quickly(files: Path) -> None:
    assert len(BOMB) < 600
    (files / "bomb.yaml").write_text(BOMB)
    one_line(cli("rtransform", "run", str(files / "k.cu"), "--spec", str(files / "bomb.yaml"), timeout=60),
             "aliases")


def test_deep_yaml_is_refused(files: Path) -> None:
    (files / "deep.yaml").write_text("kernel: " + "[" * 20000 + "]" * 20000 + "\n")
    one_line(cli("rtransform", "run", str(files / "k.cu"), "--spec", str(files / "deep.yaml"), timeout=60))


def test_a_macro_bomb_is_refused_before_the_parse(files: Path) -> None:
    bomb = "".join(["#define A0 x x\n"] + [f"#define A{i} A{i - 1} A{i - 1}\n" for i in range(1, 40)])
    (files / "bomb.cu").write_text(bomb + "__global__ void k(float* a) { int A39; a[0] = 1.0f; }\n")
    for args in (["convert", str(files / "bomb.cu"), "-o", str(files / "o.cu")],
                 ["run", str(files / "bomb.cu"), "--spec", str(files / "k.yaml")]):
        one_line(cli("rtransform", *args, timeout=120), "bomb.cu:40:1", "macro 'A39'")
    (files / "hdr.h").write_text(bomb)  # in a header too
    (files / "h.cu").write_text('#include "hdr.h"\n__global__ void k(float* a) { int A39; a[0] = 1.0f; }\n')
    one_line(cli("rtransform", "convert", str(files / "h.cu"), "-o", str(files / "o.cu"), timeout=120), "hdr.h:40:1")


def small_model(tmp: Path) -> Path:
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], initializer=[w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp / "m.onnx")
    from rammer.build import build_model
    build_model(tmp / "m.onnx", tmp / "b", target="cpu", veus=2, quiet=True)
    return tmp / "b"


def inflating_npz(path: Path, name: str, shape: tuple[int, ...]) -> None:
    """A member declaring `shape` (a gigabyte) in a few kilobytes of zeros."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf, zf.open(f"{name}.npy", "w", force_zip64=True) as fh:
        np.lib.format.write_array_header_1_0(fh, {"descr": "<f4", "fortran_order": False, "shape": shape})
        chunk = bytes(1 << 20)
        for _ in range(int(np.prod(shape)) * 4 >> 20):
            fh.write(chunk)


def test_an_inflating_npz_is_refused_by_its_declared_size(tmp_path: Path) -> None:
    b = small_model(tmp_path)
    inflating_npz(tmp_path / "big.npz", "x", (256, 1024, 1024))
    assert (tmp_path / "big.npz").stat().st_size < 4 << 20
    one_line(cli("rammer", "run", str(b), "--inputs", str(tmp_path / "big.npz")), "big.npz", "shape")
    inflating_npz(tmp_path / "w.npz", "x", (2, 4))
    np.savez(tmp_path / "extra.npz", x=np.zeros((2, 4), np.float32), z=np.zeros(3))
    one_line(cli("rammer", "run", str(b), "--inputs", str(tmp_path / "extra.npz")), "unknown array 'z'")


# ---- printf ------------------------------------------------------------------------------------------------------------
def test_kernel_printf_stops_at_the_gpus_buffer(tmp_path: Path) -> None:
    from cuda_emu import CpuModule
    src = '__global__ void chatty(int n) { for (int i = 0; i < n; ++i) printf("%05d %0100d\\n", i, threadIdx.x); }\n'
    code = ("import sys, numpy as np; from cuda_emu import CpuModule; "
            f"m = CpuModule({src!r}, ['chatty']); m.launch('chatty', 2, 64, 0, [np.int32(400)])")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert (1 << 20) - 200 <= len(res.stdout) <= 1 << 20, len(res.stdout)  # 2*64*400 lines of 107 bytes: 5.5 MB asked
    assert b"printf buffer" in res.stderr and b"dropped" in res.stderr
    del CpuModule


# ---- timeouts and environment variables ---------------------------------------------------------------------------
@pytest.mark.parametrize("args,env,needle", [
    (["--stall-timeout", "0.0005"], None, "below the stall watchdog's resolution"),
    (["--stall-timeout", "nan"], None, "finite"),
    (["--stall-timeout", "inf"], None, "finite"),
    (["--stall-timeout", "-1"], None, "finite number of seconds >= 0"),
    ([], {"RAMMER_EMU_STALL_TIMEOUT": "nan"}, "RAMMER_EMU_STALL_TIMEOUT"),
    ([], {"RAMMER_EMU_STALL_TIMEOUT": "1e-9"}, "resolution"),
    ([], {"RAMMER_EMU_YIELD_BUDGET": "1e30"}, "RAMMER_EMU_YIELD_BUDGET"),
    ([], {"RAMMER_EMU_YIELD_BUDGET": "nan"}, "RAMMER_EMU_YIELD_BUDGET"),
    ([], {"RAMMER_EMU_YIELD_BUDGET": "2.5"}, "whole number"),
    ([], {"RAMMER_EMU_ARCH": "sm_42"}, "RAMMER_EMU_ARCH"),
    ([], {"RAMMER_CACHE_MAX_MB": "nan"}, "RAMMER_CACHE_MAX_MB"),
    ([], {"RAMMER_CACHE_MAX_MB": "-5"}, "RAMMER_CACHE_MAX_MB"),
])
def test_timeouts_and_variables_are_validated(files: Path, args: list[str], env: dict | None, needle: str) -> None:
    res = cli("rtransform", "run", str(files / "k.cu"), "--spec", str(files / "k.yaml"), *args, env=env)
    one_line(res, needle)


def test_a_stall_timeout_at_its_floor_still_watches(files: Path) -> None:
    (files / "spin.cu").write_text("__global__ void k(volatile int* f) { while (f[0] == 0) { } }\n")
    (files / "spin.yaml").write_text("kernel: k\ngrid: [1]\nblock: [1]\nargs:\n"
                                     "  - {name: f, kind: buffer, dtype: int32, size: 1, init: zeros}\noutputs: [f]\n")
    res = cli("rtransform", "run", str(files / "spin.cu"), "--spec", str(files / "spin.yaml"), "--stall-timeout",
              "0.25", "--sanitize", "none", timeout=120)
    assert res.returncode != 0 and "stall" in res.stderr, res.stderr


# ---- one line for what gave tracebacks ------------------------------------------------------------------------------
def test_output_folders_that_cannot_be_written(files: Path, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who can write anywhere (root): no unwritable folder to test with")
        one_line(cli("rtransform", "convert-all", str(files), "-o", str(ro / "out")), "not writable")
        one_line(cli("rtransform", "spec", str(files / "k.cu"), "--kernel", "k", "-o", str(ro / "s.yaml")))
    finally:
        ro.chmod(0o755)


@pytest.mark.parametrize("where", ["spec-missing-folder", "plan-missing-folder", "convert-all-under-a-file"])
def test_missing_output_folders_are_one_line(files: Path, where: str) -> None:
    m = files / "m.onnx"
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], initializer=[w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), m)
    if where == "spec-missing-folder":
        res = cli("rtransform", "spec", str(files / "k.cu"), "--kernel", "k", "-o", str(files / "no" / "s.yaml"))
    elif where == "plan-missing-folder":
        res = cli("rammer", "plan", str(m), "-o", str(files / "no" / "plan.json"))
    else:
        res = cli("rtransform", "convert-all", str(files), "-o", str(files / "k.yaml" / "out"))
    one_line(res)


def test_long_and_non_utf8_names_are_one_line(files: Path) -> None:
    long = files / ("s" * 253 + ".yaml")
    one_line(cli("rtransform", "spec", str(files / "k.cu"), "--kernel", "k", "-o", str(long)), "file name")
    odd = os.fsencode(files) + b"/k\xff.cu"
    with open(odd, "w") as fh:
        fh.write(KERNEL)
    res = subprocess.run([sys.executable, "-c", "from rtransform.cli import main; main()", "convert", odd,
                          "-o", str(files / "o.cu")], cwd=REPO, capture_output=True, timeout=300)
    assert b"Traceback" not in res.stderr, res.stderr


def test_malformed_compile_commands_are_one_line(files: Path) -> None:
    (files / "build").mkdir()
    for bad in ('[{"file": 3}]', '[{"file": "k.cu", "arguments": "nvcc -c k.cu"}]',
                '[{"file": "k.cu", "directory": 5}]', '{"file": "k.cu"}', "[1, 2, "):
        (files / "build" / "compile_commands.json").write_text(bad)
        one_line(cli("rtransform", "convert", str(files / "k.cu"), "-p", str(files / "build"), "-o",
                     str(files / "o.cu")), "compile_commands.json")


def test_check_when_onnxruntime_refuses_the_inputs(tmp_path: Path) -> None:
    b = small_model(tmp_path)
    model = onnx.load(str(b / "model.onnx"))
    model.graph.node[0].op_type = "NoSuchOp"  # the build's copy no longer loads in onnxruntime
    onnx.save(model, str(b / "model.onnx"))
    res = cli("rammer", "run", str(b), "--check")
    assert "Traceback" not in res.stderr and res.returncode != 0, res.stderr


def test_a_negative_input_dimension_is_one_line(tmp_path: Path) -> None:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, -3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, -3])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    one_line(cli("rammer", "build", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "b"), "--target", "cpu"),
             "negative dimension")


@pytest.mark.parametrize("command", ["run", "verify", "convert"])
def test_a_header_with_a_syntax_error_is_blamed_not_the_cu(files: Path, command: str) -> None:
    (files / "bad.h").write_text("__device__ inline float twice(float x) { return x * 2.0f  }\n")
    (files / "h.cu").write_text('#include "bad.h"\n__global__ void k(float* a) { a[threadIdx.x] = twice(1.0f); }\n')
    args = ["convert", str(files / "h.cu"), "-o", str(files / "o.cu")] if command == "convert" else \
        [command, str(files / "h.cu"), "--spec", str(files / "k.yaml")]
    line = one_line(cli("rtransform", *args))
    assert str(files / "bad.h") + ":1:" in line and "sliced" not in line, line
