"""A hostile new user's session (issue 12): no command loses a user's file, every bad input is one line and a
non-zero exit, never a traceback, and the checks judge NaN and Inf as onnxruntime does."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from test_scheduler import mlp_model

from rammer.build import build_model
from rammer.check import nonfinite_mismatch, reference_outputs, relative_error
from rammer.runtime import BuildError
from scheduler.graph import SchedulerError

REPO = Path(__file__).resolve().parent.parent


def cli(tool: str, *args: str, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """The installed command line (`rammer` or `rtransform`), as a user runs it."""
    code = f"from {tool}.cli import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)


def error_lines(res: subprocess.CompletedProcess) -> list[str]:
    """stderr without banners and notes: what the user reads as the error."""
    return [ln for ln in res.stderr.splitlines()
            if ln.strip() and not ln.startswith(("rammer build ", "note: ", "  "))]


def assert_one_line(res: subprocess.CompletedProcess, *needles: str) -> str:
    """Failed, with exactly one error line holding every needle, and no traceback."""
    assert res.returncode != 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    lines = error_lines(res)
    assert len(lines) == 1, res.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("m") / "m.onnx"
    onnx.save(mlp_model(2), path)
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory, model: Path) -> Path:
    out = tmp_path_factory.mktemp("b") / "build"
    build_model(model, out, target="cpu", veus=2, quiet=True)
    return out


# ---- never lose a user's file -----------------------------------------------------------------------------------
def test_a_fake_manifest_does_not_make_a_folder_a_build(tmp_path: Path, model: Path) -> None:
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / "build.json").write_text("{}")
    (proj / "src" / "main.c").write_text("x")
    res = cli("rammer", "build", str(model), "-o", str(proj), "--target", "cpu")
    assert_one_line(res, "not a rammer build folder")
    assert (proj / "src" / "main.c").read_text() == "x" and (proj / "build.json").read_text() == "{}"


def test_rebuilding_keeps_the_users_files(tmp_path: Path, model: Path) -> None:
    out = tmp_path / "b"
    build_model(model, out, target="cpu", veus=2, quiet=True)
    (out / "NOTES.md").write_text("my notes")
    (out / "runs").mkdir()
    np.savez(out / "runs" / "out.npz", a=np.arange(3))
    build_model(model, out, target="cpu", veus=3, quiet=True)
    assert (out / "NOTES.md").read_text() == "my notes"
    assert np.array_equal(np.load(out / "runs" / "out.npz")["a"], np.arange(3))
    assert json.loads((out / "build.json").read_text())["num_veus"] == 3
    # a user file whose name the build writes is refused, and both stay as they were
    (out / "plan.json").unlink()
    (out / "plan.json").write_text("mine")
    manifest = json.loads((out / "build.json").read_text())
    manifest["files"].remove("plan.json")
    (out / "build.json").write_text(json.dumps(manifest))
    with pytest.raises(BuildError, match="plan.json is not the earlier build's"):
        build_model(model, out, target="cpu", veus=2, quiet=True)
    assert (out / "plan.json").read_text() == "mine" and (out / "NOTES.md").read_text() == "my notes"


def test_build_into_the_models_own_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    onnx.save(mlp_model(2), tmp_path / "m" / "m.onnx")
    with pytest.raises(BuildError, match=r"-o holds .*m\.onnx \(the model being built\)"):
        build_model(tmp_path / "m" / "m.onnx", tmp_path / "m", target="cpu", quiet=True)
    assert (tmp_path / "m" / "m.onnx").is_file()


SOURCE = """\
__global__ void good(float* a) { a[threadIdx.x] = 1.0f; }
__global__ void bad(float* a) { unsigned b; asm("mov.u32 %0, %%ctaid.x;" : "=r"(b)); a[b] = 2.0f; }
__global__ void good2(float* a) { a[threadIdx.x] = 2.0f; }
"""


def test_convert_never_overwrites_its_input(tmp_path: Path) -> None:
    src = tmp_path / "k.cu"
    src.write_text(SOURCE)
    res = cli("rtransform", "convert", str(src), "-o", str(src), "--kernel", "good")
    assert_one_line(res, "(the source), an input of this run")
    assert src.read_text() == SOURCE
    link = tmp_path / "alias.cu"
    link.symlink_to(src)
    assert_one_line(cli("rtransform", "convert", str(src), "-o", str(link), "--kernel", "good"), "(the source), an input of this run")
    assert src.read_text() == SOURCE


def test_partly_refused_file_names_the_kernels_that_convert(tmp_path: Path) -> None:
    src = tmp_path / "k.cu"
    src.write_text(SOURCE)
    res = cli("rtransform", "convert", str(src), "-o", str(tmp_path / "o.cu"))
    assert res.returncode == 1 and "ctaid" in res.stderr
    assert "--kernel good --kernel good2" in res.stderr and not (tmp_path / "o.cu").exists()


@pytest.mark.parametrize("args,needle", [
    (["-o", "/proc/nope/x.cu", "--kernel", "good"], "does not exist"),
    (["-o", "-", "--json", "--kernel", "good"], "both write to stdout"),
])
def test_convert_output_errors_are_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    src = tmp_path / "k.cu"
    src.write_text(SOURCE)
    res = cli("rtransform", "convert", str(src), *args)
    assert_one_line(res, needle)
    assert res.stdout == ""


def test_convert_all_writes_no_empty_file_and_skips_its_own_outputs(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "refused.cu").write_text(
        '__global__ void only(float* a) { unsigned b; asm("mov.u32 %0, %%ctaid.x;" : "=r"(b)); a[b] = 1; }\n')
    (src / "ok.cu").write_text("__global__ void k(float* a) { a[threadIdx.x] = 1.0f; }\n")
    assert cli("rtransform", "convert", str(src / "ok.cu")).returncode == 0  # leaves ok.rtask.cu beside it
    res = cli("rtransform", "convert-all", str(src), "-o", str(tmp_path / "out"), "--json")
    report = json.loads(res.stdout)
    assert res.returncode == 0, res.stderr
    assert report["run"]["skipped_converter_outputs"] == ["ok.rtask.cu"]
    assert [f["path"] for f in report["files"]] == ["ok.cu", "refused.cu"]
    assert not (tmp_path / "out" / "refused.cu").exists()
    assert json.loads((tmp_path / "out" / "refused.rkernels.json").read_text())["refused"][0]["name"] == "only"
    assert all(p.stat().st_size > 0 for p in (tmp_path / "out").rglob("*.cu"))


def test_interrupted_convert_all_keeps_the_finished_files_in_its_cache(tmp_path: Path, monkeypatch) -> None:
    from rtransform import batch
    src = tmp_path / "src"
    src.mkdir()
    for i in range(3):
        (src / f"k{i}.cu").write_text(f"__global__ void k{i}(float* a) {{ a[threadIdx.x] = {i}.0f; }}\n")
    real = batch.run_pool

    def interrupted(jobs, workers, on_done):
        real(jobs[:1], 1, on_done)  # the first file finishes, then the user presses Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(batch, "run_pool", interrupted)
    with pytest.raises(KeyboardInterrupt):
        batch.convert_all(src, tmp_path / "out", jobs=1)
    cache = json.loads((tmp_path / "out" / batch.CACHE_NAME).read_text())["entries"]
    assert list(cache) == ["k0.cu"]
    monkeypatch.setattr(batch, "run_pool", real)
    report = batch.convert_all(src, tmp_path / "out", jobs=1)
    assert report["run"]["cache_hits"] == 1 and report["run"]["converted_files"] == 2


# ---- rammer run: saving, checks, damaged builds -------------------------------------------------------------------
def test_run_save_into_a_missing_folder_fails_before_running(built: Path) -> None:
    res = cli("rammer", "run", str(built), "--save", "no/dir/o.npz")
    assert_one_line(res, "no/dir/o.npz", "does not exist")
    assert "ran " not in res.stdout  # refused up front: no run whose outputs would be lost


def test_run_save_never_overwrites_an_input(built: Path) -> None:
    before = (built / "weights.npz").read_bytes()
    assert_one_line(cli("rammer", "run", str(built), "--save", str(built / "weights.npz")), "an input of this run")
    assert (built / "weights.npz").read_bytes() == before


def test_check_when_the_builds_model_is_gone(tmp_path: Path, model: Path) -> None:
    out = tmp_path / "b"
    build_model(model, out, target="cpu", veus=2, quiet=True)
    (out / "model.onnx").unlink()
    assert_one_line(cli("rammer", "run", str(out), "--check"), "corrupt or incomplete build", "model.onnx")


@pytest.mark.parametrize("damage", ["manifest-json", "manifest-field", "weights"])
def test_tampered_build_is_one_line(tmp_path: Path, model: Path, damage: str) -> None:
    out = tmp_path / "b"
    build_model(model, out, target="cpu", veus=2, quiet=True)
    if damage == "manifest-json":
        (out / "build.json").write_text("{not json")
    elif damage == "manifest-field":
        m = json.loads((out / "build.json").read_text())
        del m["buffers"]
        (out / "build.json").write_text(json.dumps(m))
    else:
        (out / "weights.npz").write_bytes(b"PK\x03\x04 truncated")
    line = assert_one_line(cli("rammer", "run", str(out)))
    assert "corrupt or incomplete build" in line or "not a rammer build" in line


def test_nan_and_inf_in_the_same_places_agree() -> None:
    ref = np.array([np.nan, np.inf, -np.inf, 1.0, -2.0])
    assert relative_error([ref.copy()], [ref]) == 0.0
    assert nonfinite_mismatch(ref.copy(), ref) is None
    wrong = ref.copy()
    wrong[0] = 0.5
    assert relative_error([wrong], [ref]) == np.inf
    assert nonfinite_mismatch(wrong, ref) == "0.5 where onnxruntime has NaN at index [0] (1 such element(s))"
    flipped = ref.copy()
    flipped[1] = -np.inf
    assert "-inf where onnxruntime has +inf at index [1]" in nonfinite_mismatch(flipped, ref)
    # a finite error is scaled by the largest finite reference, not by inf
    near = ref.copy()
    near[3] = 1.0 + 2e-5
    assert relative_error([near], [ref]) == pytest.approx(1e-5)


@pytest.mark.parametrize("op,attrs", [("Relu", {}), ("MaxPool", {"kernel_shape": [2, 2]}), ("Softmax", {"axis": -1}),
                                      ("ReduceMax", {"keepdims": 1})])
def test_nan_and_inf_inputs_follow_onnxruntime(tmp_path: Path, op: str, attrs: dict) -> None:
    """Relu and the Max-based ops keep NaN as ONNX does; `rammer run --check` passes when both agree."""
    from rammer.runtime import load
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    m = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
    m = onnx.shape_inference.infer_shapes(m)
    onnx.save(m, tmp_path / "m.onnx")
    try:
        build_model(tmp_path / "m.onnx", tmp_path / "b", target="cpu", veus=2, quiet=True)
    except SchedulerError as exc:
        pytest.skip(f"{op} is not built by this corpus: {str(exc)[:80]}")
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 2, 4, 4)).astype(np.float32)}
    feeds["x"][0, 0, 0, 0] = np.nan
    feeds["x"][0, 1, 2, 2] = np.inf
    feeds["x"][0, 1, 3, 3] = -np.inf
    got = load(tmp_path / "b").run(feeds)["y"]
    ref = reference_outputs(m, feeds)[0]
    assert nonfinite_mismatch(got, ref) is None, (op, got, ref)
    assert relative_error([got], [ref]) <= 1e-4


# ---- limits up front -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("veus,needle", [("0", "--veus must be >= 1"), ("100000", "holds at most")])
def test_veus_out_of_range_is_one_line(tmp_path: Path, model: Path, veus: str, needle: str) -> None:
    res = cli("rammer", "build", str(model), "-o", str(tmp_path / "b"), "--target", "cpu", "--veus", veus)
    assert_one_line(res, needle)
    assert not (tmp_path / "b").exists()


def test_gpu_veus_beyond_co_residency(tmp_path: Path, model: Path) -> None:
    res = cli("rammer", "build", str(model), "-o", str(tmp_path / "b"), "--target", "gpu", "--veus", "100000")
    assert_one_line(res, "co-resident")


def test_build_without_a_gpu_defaults_to_the_cpu(tmp_path: Path, model: Path) -> None:
    from vdevice.gpu import gpu_available
    if gpu_available()[0]:
        pytest.skip("a GPU is visible: the default target is the GPU")
    res = cli("rammer", "build", str(model), "-o", str(tmp_path / "b"), "--veus", "2")
    assert res.returncode == 0, res.stderr
    assert "no GPU is visible" in res.stderr and "--target cpu" in res.stderr
    assert json.loads((tmp_path / "b" / "build.json").read_text())["target"] == "cpu"
    assert cli("rammer", "run", str(tmp_path / "b"), "--check").returncode == 0


@pytest.mark.parametrize("field,value,needle", [
    ("size", "10000000000", "GiB is available"),
    ("low", "-.inf", "must be a finite number"),
])
def test_spec_limits_are_one_line(tmp_path: Path, field: str, value: str, needle: str) -> None:
    (tmp_path / "k.cu").write_text("__global__ void k(float* a) { a[threadIdx.x] = 1.0f; }\n")
    arg = {"size": f"size: {value}", "low": f"size: 32, low: {value}"}[field]
    (tmp_path / "k.yaml").write_text(f"kernel: k\ngrid: [1]\nblock: [32]\nargs:\n"
                                     f"  - {{name: a, kind: buffer, dtype: float32, {arg}}}\noutputs: [a]\n")
    assert_one_line(cli("rtransform", "run", str(tmp_path / "k.cu"), "--spec", str(tmp_path / "k.yaml")), needle)


def test_zoo_into_an_unwritable_place_is_one_line() -> None:
    assert_one_line(cli("rammer", "zoo", "mlp" if False else "lstm-tc", "--small", "-o", "/proc/x.onnx"),
                    "cannot write")


# ---- the emulator's budgets and its cache ---------------------------------------------------------------------------
SPIN = """\
__global__ void spin(int* flag) { while (atomicAdd(flag, 0) == 0) { } }
"""


def test_watchdog_names_its_knobs_and_they_work(tmp_path: Path) -> None:
    (tmp_path / "s.cu").write_text(SPIN)
    (tmp_path / "s.yaml").write_text("kernel: spin\ngrid: [1]\nblock: [1]\nargs:\n"
                                     "  - {name: flag, kind: buffer, dtype: int32, size: 1, init: zeros}\n"
                                     "outputs: [flag]\n")
    res = cli("rtransform", "run", str(tmp_path / "s.cu"), "--spec", str(tmp_path / "s.yaml"),
              "--yield-budget", "1000")
    assert res.returncode != 0 and "1000 yields" in res.stderr and "--yield-budget" in res.stderr
    env = dict(os.environ, RAMMER_EMU_YIELD_BUDGET="2000")
    res = cli("rtransform", "run", str(tmp_path / "s.cu"), "--spec", str(tmp_path / "s.yaml"), env=env)
    assert res.returncode != 0 and "2000 yields" in res.stderr
    # the detail (which thread polls where) comes through below the summary line
    assert "\n  " in res.stderr.strip()


def test_a_damaged_cached_library_is_rebuilt(tmp_path: Path) -> None:
    env = dict(os.environ, RAMMER_CACHE=str(tmp_path / "cache"))
    code = ("import numpy as np; from cuda_emu import CpuModule; "
            "m = CpuModule('__global__ void k(float* a) { a[threadIdx.x] = 3.0f; }', ['k']); "
            "a = np.zeros(32, np.float32); m.launch('k', 1, 32, 0, [a]); print(m.library_path, a.sum())")
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert first.returncode == 0, first.stderr
    lib = Path(first.stdout.split()[0])
    lib.write_bytes(lib.read_bytes()[:100])  # a crash or a full disk left it truncated
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr
    assert float(again.stdout.split()[1]) == 96.0 and lib.stat().st_size > 100


def test_cache_evicts_the_least_recently_used_beyond_its_cap(tmp_path: Path, monkeypatch) -> None:
    from toolchain.cache import cache_dir, evict
    monkeypatch.setenv("RAMMER_CACHE", str(tmp_path))
    emu = cache_dir("emu")
    emu.mkdir(parents=True, exist_ok=True)
    for i in range(5):
        f = emu / f"{i}.so"
        f.write_bytes(b"x" * 1000)
        os.utime(f, (1000 + i, 1000 + i))
    freed = evict("emu", keep=emu / "0.so", cap=2500)
    assert freed == 3000
    assert sorted(p.name for p in emu.iterdir()) == ["0.so", "4.so"]  # 1, 2, 3 went: the oldest but the kept one


def test_the_suite_does_not_write_into_the_users_cache() -> None:
    from toolchain.cache import cache_root
    assert cache_root() != Path.home() / ".cache" / "rammer"


def test_profile_key_changes_when_the_kernel_source_changes(tmp_path: Path) -> None:
    """The measured-profile cache is keyed by the kernel's source too: an edited kernel is never served a stale time."""
    import dataclasses
    import shutil

    from kernel_corpus.bindings import NodeInfo, TensorInfo
    from kernel_corpus.ops.elementwise import OPS as ELEMENTWISE
    from scheduler.profiler import launch_key
    shutil.copytree(REPO / "kernel_corpus" / "legacy", tmp_path / "legacy")
    relu = next(b for d in ELEMENTWISE if d.op_type == "Relu" for b in d.bindings)
    mine = dataclasses.replace(relu, legacy_dir=tmp_path / "legacy")
    node = NodeInfo("Relu", "n", [TensorInfo((4, 100))], [TensorInfo((4, 100))])
    before = [launch_key(ln) for ln in mine.launch(node)]
    assert before == [launch_key(ln) for ln in mine.launch(node)]  # stable while the source is unchanged
    src = tmp_path / "legacy" / mine.source
    src.write_text(src.read_text() + "\n// an edit\n")
    after = [launch_key(ln) for ln in mine.launch(node)]
    assert all(a != b for a, b in zip(before, after)) and len(after) == len(before)


# ---- the cache owns a marked root (issue 30) ----------------------------------------------------------------------
def cache_cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return cli("rammer", "cache", *args, env=dict(os.environ, RAMMER_CACHE=str(root)))


def test_cache_clear_never_deletes_a_folder_it_does_not_own(tmp_path: Path) -> None:
    """$RAMMER_CACHE=$HOME: a home folder (files, and folders named like the cache's parts) is not the cache."""
    home = tmp_path / "home"
    (home / "emu").mkdir(parents=True)
    (home / "emu" / "thesis.tex").write_text("years of work")
    (home / "profiles").mkdir()
    (home / ".bashrc").write_text("alias")
    for args in (["clear"], ["clear", "emu"], ["clear", "profiles"]):
        res = cache_cli(home, *args)
        assert res.returncode == 2 and "not the rammer cache" in res.stderr and "Traceback" not in res.stderr
    assert (home / "emu" / "thesis.tex").read_text() == "years of work" and (home / ".bashrc").exists()
    info = cache_cli(home, "info")  # reading is harmless, and walks only the cache's own parts
    assert info.returncode == 0 and ".bashrc" not in info.stdout
    # and nothing is ever built into it: the emulator refuses the root in one line
    code = "from cuda_emu import CpuModule; CpuModule('__global__ void k(int* p) { p[0] = 1; }', ['k'])"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, RAMMER_CACHE=str(home)))
    assert res.returncode != 0 and "holds files that are not the rammer cache's" in res.stderr
    assert sorted(p.name for p in home.iterdir()) == [".bashrc", "emu", "profiles"]


@pytest.mark.parametrize("part", ["ANYNAME", "..", "/etc", "CACHEDIR.TAG", "emu/../.."])
def test_cache_clear_of_an_unknown_part_is_refused(tmp_path: Path, part: str) -> None:
    root = tmp_path / "cache"
    from toolchain.cache import claim_root
    claim_root(root)
    (root / "ANYNAME").mkdir()
    (root / "ANYNAME" / "x").write_text("kept")
    res = cache_cli(root, "clear", part)
    assert res.returncode == 2 and "is not a part of the cache" in res.stderr, res.stderr
    assert (root / "ANYNAME" / "x").read_text() == "kept"


def test_cache_clear_all_keeps_what_is_not_its_own(tmp_path: Path) -> None:
    from toolchain.cache import PARTS, TAG, claim_root
    root = claim_root(tmp_path / "cache")
    for p in PARTS:
        (root / p).mkdir()
        (root / p / "entry").write_bytes(b"x" * 100)
    (root / "emu" / "link").symlink_to(tmp_path / "outside")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "keep").write_text("k")
    (root / "notes.txt").write_text("the user's")  # dropped into the cache root later
    res = cache_cli(root, "clear")
    assert res.returncode == 0 and "freed" in res.stdout
    assert sorted(p.name for p in root.iterdir()) == ["notes.txt"] and not (root / TAG).exists()
    assert (tmp_path / "outside" / "keep").read_text() == "k"


def test_a_cache_from_before_the_tag_is_adopted(tmp_path: Path) -> None:
    from toolchain.cache import TAG, cache_dir, claim_root
    root = tmp_path / "old"
    (root / "emu").mkdir(parents=True)
    (root / "emu" / "a.so").write_bytes(b"elf")
    claim_root(root)
    assert (root / TAG).is_file() and (root / "emu" / "a.so").exists()
    with pytest.raises(ValueError, match="not one of"):
        cache_dir("../../etc")


def test_a_cache_tagged_by_a_version_with_other_parts_stays_the_cache(tmp_path: Path) -> None:
    """The H100 run of 2026-11-27: a version that added a part ('nvrtc') refused the cache its predecessor had
    tagged (the tag's text lists the parts), so every build failed until the folder was moved. The tag's signature
    and name mark the cache; the tag is rewritten, the entries kept."""
    from toolchain.cache import TAG, TAG_TEXT, claim_root
    root = tmp_path / "cache"
    (root / "emu").mkdir(parents=True)
    (root / "emu" / "a.so").write_bytes(b"elf")
    old = "".join(TAG_TEXT.splitlines(keepends=True)[:2]) + "# (emu, profiles) are ever deleted.\n"
    (root / TAG).write_text(old)
    assert claim_root(root) == root
    assert (root / TAG).read_text() == TAG_TEXT and (root / "emu" / "a.so").read_bytes() == b"elf"
    res = cache_cli(root, "clear", "emu")
    assert res.returncode == 0 and not (root / "emu" / "a.so").exists(), res.stderr
    forged = tmp_path / "forged"  # a tag with another cache's name is not ours
    forged.mkdir()
    (forged / TAG).write_text("Signature: 8a477f597d28d172789f06886806bc55\n# some other tool's cache\n")
    (forged / "data").write_text("theirs")
    assert cache_cli(forged, "clear").returncode == 2 and (forged / "data").read_text() == "theirs"
