"""Launch specs: format validation, deterministic inputs, and the check against a kernel's C parameter types."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from converter.slice import kernel_params
from rtransform.spec import SpecError, check_params, load_spec, make_inputs, parse_spec

REPO = Path(__file__).resolve().parent.parent

KERNEL = """
template <typename T, int B>
__global__ void k(float* __restrict__ y, const double* x, T* t, int n, unsigned char flag, long long big) {}
"""
GOOD = {
    "kernel": "k", "template_args": ["float", 16], "grid": [3, 2], "block": [16, 4, 1], "seed": 5,
    "args": [
        {"name": "y", "kind": "buffer", "dtype": "float32", "size": 40, "init": "zeros"},
        {"name": "x", "kind": "buffer", "dtype": "float64", "size": 33},
        {"name": "t", "kind": "buffer", "dtype": "int16", "size": 7, "init": "arange"},
        {"name": "n", "kind": "scalar", "dtype": "int32", "value": 33},
        {"name": "flag", "kind": "scalar", "dtype": "uint8", "value": 1},
        {"name": "big", "kind": "scalar", "dtype": "int64", "value": -5},
    ],
    "outputs": ["y"],
}


def write(tmp_path: Path, data: dict, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def with_change(path: list, value) -> dict:
    """A deep copy of GOOD with one field replaced (value None deletes it)."""
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


def test_good_spec_loads(tmp_path):
    s = load_spec(write(tmp_path, GOOD))
    assert s.grid == (3, 2, 1) and s.block == (16, 4, 1)
    assert s.kernel_expr() == "k<float, 16>"
    assert s.num_blocks() == 6 and s.block_threads() == 64
    assert s.tolerance == 0 and s.dynamic_smem == 0 and s.outputs == ["y"]


def test_params_of_template_kernel_match(tmp_path):
    params = kernel_params(KERNEL, str(tmp_path / "k.cu"), "k")
    assert [(p.name, p.pointer) for p in params] == [("y", True), ("x", True), ("t", True), ("n", False),
                                                    ("flag", False), ("big", False)]
    assert params[2].elem is None  # T*: depends on the template argument
    check_params(load_spec(write(tmp_path, GOOD)), params)


@pytest.mark.parametrize("seed", [0, 1, 17])
def test_inputs_are_deterministic_and_in_range(tmp_path, seed):
    data = with_change(["seed"], seed)
    a = make_inputs(load_spec(write(tmp_path, data)))
    b = make_inputs(load_spec(write(tmp_path, data, "t.yaml")))
    for k in a:
        assert np.array_equal(a[k], b[k]) and a[k].dtype == b[k].dtype
    assert np.array_equal(a["y"], np.zeros(40, np.float32))
    assert np.array_equal(a["t"], np.arange(7, dtype=np.int16))
    assert a["x"].dtype == np.float64 and a["x"].min() >= -1 and a["x"].max() < 1 and len(np.unique(a["x"])) == 33
    assert a["n"] == 33 and a["n"].dtype == np.int32 and a["big"].dtype == np.int64 and a["flag"].dtype == np.uint8
    other = make_inputs(load_spec(write(tmp_path, with_change(["seed"], seed + 1))))
    assert not np.array_equal(a["x"], other["x"])


@pytest.mark.parametrize("dtype,lo,hi", [("int8", -128, 128), ("int32", -1000, 1000), ("uint16", 0, 1000),
                                         ("uint8", 0, 256), ("int64", -1000, 1000), ("uint64", 0, 1000)])
def test_default_integer_ranges(dtype, lo, hi):
    s = parse_spec({"kernel": "k", "grid": 1, "block": 1, "seed": 3, "outputs": ["a"],
                    "args": [{"name": "a", "kind": "buffer", "dtype": dtype, "size": 5000}]})
    a = make_inputs(s)["a"]
    assert a.dtype == np.dtype(dtype)
    assert a.min() >= lo and a.max() < hi
    assert a.min() < lo + (hi - lo) // 10 and a.max() >= hi - (hi - lo) // 10  # the whole range is used


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "bool"])
def test_low_high_and_other_dtypes(dtype):
    arg = {"name": "a", "kind": "buffer", "dtype": dtype, "size": 3000}
    if dtype != "bool":
        arg.update(low=2, high=5)
    a = make_inputs(parse_spec({"kernel": "k", "grid": 1, "block": 1, "args": [arg], "outputs": ["a"]}))["a"]
    assert a.dtype == np.dtype(dtype)
    if dtype == "bool":
        assert 1000 < a.sum() < 2000
    else:
        assert a.min() >= 2 and a.max() <= 5 and a.mean() == pytest.approx(3.5, abs=0.1)


BAD = [
    (["args", 0, "dtype"], "floaty32", "args[0] (y).dtype: unknown dtype 'floaty32'"),
    (["args", 1, "kind"], "pointer", "args[1] (x).kind: unknown kind 'pointer'"),
    (["args", 1, "init"], "gaussian", "args[1] (x).init: unknown init 'gaussian'"),
    (["kernel"], None, "kernel: missing field"),
    (["grid"], None, "grid: missing field"),
    (["args", 1, "size"], None, "args[1] (x).size: missing field"),
    (["args", 3, "value"], None, "args[3] (n).value: missing field"),
    (["args", 3, "value"], 2**40, "args[3] (n).value: 1099511627776 is not a int32 value"),
    (["outputs"], ["n"], "outputs[0]: 'n' is a scalar, not a buffer"),
    (["outputs"], ["zz"], "outputs[0]: 'zz' is not an argument"),
    (["grid"], [3, 0, 1], "grid: has a zero dimension"),
    (["block"], [0], "block: has a zero dimension"),
    (["block"], [32, 33, 1], "block: 1056 threads per block (at most 1024)"),
    (["block"], [1, 1, 1, 1], "block: must be a list of 1 to 3 positive integers"),
    (["tolerance"], -1, "tolerance: must be >= 0"),
    (["colour"], "red", "colour: unknown field"),
]


@pytest.mark.parametrize("path,value,message", BAD, ids=[m.split(":")[0] for _, _, m in BAD])
def test_bad_specs_name_file_and_field(tmp_path, path, value, message):
    data = with_change(path, value) if path != ["colour"] else {**GOOD, "colour": value}
    p = write(tmp_path, data)
    with pytest.raises(SpecError) as e:
        load_spec(p)
    assert str(e.value).startswith(f"{p}: ") and message in str(e.value)
    assert "\n" not in str(e.value)


MISMATCH = [
    (["args"], "args: 5 given, kernel 'k' takes 6"),
    (["args", 0, "kind"], "args[0] (y).kind: parameter 'y' is a pointer"),
    (["args", 3, "kind"], "args[3] (n).kind: parameter 'n' is a scalar"),
    (["args", 1, "dtype"], "args[1] (x).dtype: parameter 'x' has type const double *, which needs float64, not float32"),
    (["args", 5, "dtype"], "args[5] (big).dtype: parameter 'big' has type long long, which needs int64, not int32"),
]


@pytest.mark.parametrize("path,message", MISMATCH)
def test_spec_against_kernel_parameters(tmp_path, path, message):
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    if path == ["args"]:
        data["args"].pop()
    elif path[-1] == "kind":
        arg = data["args"][path[1]]
        if arg["kind"] == "buffer":
            arg.update(kind="scalar", value=1)
            del arg["size"], arg["init"]
            data["outputs"] = ["x"]
        else:
            arg.update(kind="buffer", size=4)
            del arg["value"]
    else:
        data["args"][path[1]]["dtype"] = "int32" if path[1] == 5 else "float32"
        if path[1] == 5:
            data["args"][5]["value"] = 3
    spec = load_spec(write(tmp_path, data))
    params = kernel_params(KERNEL, str(tmp_path / "k.cu"), "k")
    with pytest.raises(SpecError) as e:
        check_params(spec, params)
    assert message in str(e.value) and str(e.value).startswith(str(tmp_path / "s.yaml"))


def test_invalid_yaml_and_missing_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("kernel: [unclosed\n")
    with pytest.raises(SpecError, match=r"bad.yaml:2:1: error: invalid YAML"):
        load_spec(p)
    p.write_text("kernel: k\ngrid: [1]\n  block: [32]\n")  # an indented key under a plain value: line 3, col 3
    with pytest.raises(SpecError, match=r"bad.yaml:3:3: error: invalid YAML: .*block mapping"):
        load_spec(p)
    with pytest.raises(SpecError) as missing:
        load_spec(tmp_path / "nope.yaml")
    assert str(missing.value) == f"{tmp_path / 'nope.yaml'}: error: no such file"


def test_cli_reports_bad_spec_in_one_line(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    spec = write(tmp_path, with_change(["args", 0, "dtype"], "complex64"))
    proc = subprocess.run([sys.executable, "-m", "rtransform.cli", "run", str(src), "--spec", str(spec)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2  # bad input (toolchain.exits)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown dtype 'complex64'" in lines[0] and str(spec) in lines[0]
