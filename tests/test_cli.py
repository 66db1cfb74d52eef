"""One CLI convention across `rtransform` and `rammer`: help on every option, the same defaults, the exit codes of
toolchain.exits (README "Exit codes"), one naming of converted files, a light start-up, and one-line errors for
missing inputs and unknown kernels."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from rammer.cli import main as rammer_main
from rtransform.cli import main as rtransform_main
from toolchain.exits import Exit

REPO = Path(__file__).resolve().parent.parent
HEAVY = ("numpy", "onnx", "onnxruntime", "clang", "clang.cindex", "scipy")


def walk(group: click.Group, prefix: str = "") -> list[tuple[str, click.Command]]:
    """Every command below a group, with its full name."""
    out = []
    for name, cmd in group.commands.items():
        full = f"{prefix} {name}".strip()
        out.append((full, cmd))
        if isinstance(cmd, click.Group):
            out += walk(cmd, full)
    return out


COMMANDS = [(f"rammer {n}", c) for n, c in walk(rammer_main)] + [(f"rtransform {n}", c) for n, c in
                                                                 walk(rtransform_main)]


@pytest.mark.parametrize("name,cmd", COMMANDS, ids=[n for n, _ in COMMANDS])
def test_every_command_and_option_has_help(name: str, cmd: click.Command) -> None:
    assert (cmd.help or "").strip(), f"{name} has no help text"
    for p in cmd.params:
        if isinstance(p, click.Option) and not p.hidden:
            assert (p.help or "").strip(), f"{name} {p.opts[0]} has no help text"


def test_shared_options_have_the_same_defaults() -> None:
    """An option that several commands take (--target, --profile, --policy, --device of a run) defaults alike."""
    by_option: dict[str, set] = {}
    for name, cmd in COMMANDS:
        if name in ("rammer export",):  # --target there is the target of the --check builds: cpu, like the tests
            continue
        for p in cmd.params:
            if isinstance(p, click.Option) and p.opts[-1] in ("--target", "--profile", "--policy", "--precision"):
                by_option.setdefault(p.opts[-1], set()).add(p.default)
    assert by_option["--target"] == {None}  # None: the GPU when one is visible, else the CPU (with a note)
    assert by_option["--profile"] == {"auto"} and by_option["--policy"] == {"wavefront"}


@pytest.mark.parametrize("argv", [["rammer.cli", "--version"], ["rammer.cli", "--help"],
                                  ["rtransform.cli", "--version"], ["rtransform.cli", "--help"]])
def test_version_and_help_load_no_heavy_module(argv: list[str]) -> None:
    """`--version` and `--help` answer without importing numpy, onnx or libclang (what made them take 2.5 s)."""
    code = (f"import sys\nfrom {argv[0]} import main\n"
            f"try:\n    main([{argv[1]!r}])\nexcept SystemExit:\n    pass\n"
            f"print('LOADED', [m for m in {HEAVY!r} if m in sys.modules])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "LOADED []"


def invoke(main: click.Group, *args: str) -> tuple[int, str]:
    """Run a command in-process: (exit status, stdout and stderr)."""
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.output


def no_gpu() -> None:
    from vdevice.gpu import gpu_available
    if gpu_available()[0]:
        pytest.skip("a GPU is visible: the no-GPU exit status cannot be seen here")


def test_missing_inputs_exit_2_in_one_line_without_a_position(tmp_path: Path) -> None:
    nope, spec = str(tmp_path / "nope.cu"), str(REPO / "examples" / "softmax.spec.yaml")
    for main, args in [(rtransform_main, ["convert", nope]), (rtransform_main, ["spec", nope, "--kernel", "k"]),
                       (rtransform_main, ["run", nope, "--spec", spec]),
                       (rtransform_main, ["verify", nope, "--spec", spec]),
                       (rtransform_main, ["verify", str(REPO / "examples" / "softmax.cu"), "--spec", nope])]:
        code, out = invoke(main, *args)
        assert code == Exit.USAGE and out.count("\n") == 1, (args, out)
        assert out.startswith(f"{nope}: error: no such file"), out
    code, out = invoke(rammer_main, "build", str(tmp_path / "nope.onnx"), "-o", str(tmp_path / "b"), "--target",
                       "cpu")
    assert code == Exit.USAGE and "nope.onnx: no such file" in out and not (tmp_path / "b").exists()
    code, out = invoke(rammer_main, "run", str(tmp_path))
    assert code == Exit.USAGE and out.count("\n") == 1 and "not a rammer build folder" in out


@pytest.mark.parametrize("command", ["build", "plan", "profile"])
def test_a_vdevice_of_no_veus_is_a_usage_error(tmp_path: Path, command: str) -> None:
    """--veus 0 or below is bad input (exit 2, nothing written), not a failure of the build (exit 1)."""
    model = tmp_path / "m.onnx"
    model.write_bytes(b"")
    for bad in ("0", "-3"):
        args = [command, str(model), "--veus", bad] + (["-o", str(tmp_path / "b")] if command == "build" else [])
        code, out = invoke(rammer_main, *args)
        assert code == Exit.USAGE and "--veus" in out, (args, code, out)
    assert not (tmp_path / "b").exists()


def test_without_a_gpu_every_command_that_needs_one_exits_3(tmp_path: Path) -> None:
    no_gpu()
    model = tmp_path / "m.onnx"
    assert invoke(rammer_main, "zoo", "lstm-tc", "--small", "-o", str(model))[0] == 0
    cu, spec = str(REPO / "examples" / "softmax.cu"), str(REPO / "examples" / "softmax.spec.yaml")
    for main, args in [(rammer_main, ["bench", str(model)]), (rammer_main, ["profile", str(model), "--target", "gpu"]),
                       (rammer_main, ["plan", str(model), "--profile", "measured"]),
                       (rammer_main, ["build", str(model), "-o", str(tmp_path / "b"), "--target", "gpu",
                                      "--profile", "measured"]),
                       (rtransform_main, ["run", cu, "--spec", spec, "--device", "gpu"])]:
        code, out = invoke(main, *args)
        assert code == Exit.MISSING, (args, code, out)
        assert "--profile measured with --target gpu" not in out  # profile has no --profile option to name
    assert not (tmp_path / "b").exists()


def test_profile_without_target_falls_back_to_the_cpu_like_build(tmp_path: Path) -> None:
    no_gpu()
    model = tmp_path / "m.onnx"
    assert invoke(rammer_main, "zoo", "lstm-tc", "--small", "-o", str(model))[0] == 0
    res = CliRunner().invoke(rammer_main, ["profile", str(model), "--json"])
    assert res.exit_code == 0, res.output
    assert "profiling for --target cpu" in res.stderr
    summary = json.loads(res.stdout)
    assert "H100" not in summary["device"]


def test_convert_to_a_folder_names_files_as_convert_all_does(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "softmax.cu").write_text((REPO / "examples" / "softmax.cu").read_text())
    code, out = invoke(rtransform_main, "convert-all", str(src), "-o", str(tmp_path / "all"), "--jobs", "1")
    assert code == 0, out
    (tmp_path / "one").mkdir()
    code, out = invoke(rtransform_main, "convert", str(src / "softmax.cu"), "-o", str(tmp_path / "one") + "/")
    assert code == 0, out
    produced = lambda d: sorted(p.name for p in d.iterdir() if p.name != "report.json" and not p.name.startswith("."))
    assert produced(tmp_path / "one") == produced(tmp_path / "all") == ["softmax.cu", "softmax.rkernels.json"]
    assert (tmp_path / "one" / "softmax.cu").read_text() == (tmp_path / "all" / "softmax.cu").read_text()
    # beside its source a converted file gets the .rtask tag, and a header keeps its kind (never x.cu's name)
    (src / "tile.cuh").write_text("__global__ void fill(float* o) { o[threadIdx.x] = 1.f; }\n")
    code, out = invoke(rtransform_main, "convert", str(src / "tile.cuh"))
    assert code == 0, out
    assert (src / "tile.rtask.cuh").is_file() and (src / "tile.rtask.cuh.rkernels.json").is_file()


def test_unknown_kernel_names_the_kernels_that_exist(tmp_path: Path) -> None:
    src = tmp_path / "two.cu"
    src.write_text("__global__ void alpha(float* o) { o[0] = 1; }\n__global__ void beta(float* o) { o[1] = 2; }\n")
    code, out = invoke(rtransform_main, "convert", str(src), "--kernel", "gamma", "-o", str(tmp_path / "o.cu"))
    assert code == Exit.USAGE and out.count("\n") == 1
    assert "'gamma'" in out and "alpha, beta" in out and ":1:1:" not in out
    assert not (tmp_path / "o.cu").exists()


def test_grid_sync_refusal_is_one_line(tmp_path: Path) -> None:
    src = tmp_path / "gs.cu"
    src.write_text("#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n"
                   "__global__ void k(float* d, int n) {\n  cg::grid_group grid = cg::this_grid();\n"
                   "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) d[i] *= 2.f;\n  grid.sync();\n}\n")
    code, out = invoke(rtransform_main, "convert", str(src), "-o", str(tmp_path / "o.cu"))
    assert code == Exit.FAILED
    assert out.count("grid-wide synchronisation") == 1 and f"{src}:4:" in out


def test_cache_root_honours_xdg_cache_home(tmp_path: Path, monkeypatch) -> None:
    from toolchain.cache import cache_root
    monkeypatch.delenv("RAMMER_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "rammer"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # the spec: a relative value is ignored
    assert cache_root() == Path.home() / ".cache" / "rammer"
    monkeypatch.setenv("RAMMER_CACHE", str(tmp_path / "own"))
    assert cache_root() == tmp_path / "own"


@pytest.mark.slow
def test_readmes_first_command_runs_in_a_fresh_folder(tmp_path: Path) -> None:
    """The README's main job (its first bash block, after the install) run as written in a folder holding only the
    shipped examples: every step exits 0 and the build's --check passes."""
    import re
    import shutil
    block = re.search(r"```bash\n(.*?)\n```", (REPO / "README.md").read_text(), re.S)
    assert block is not None
    steps = [s.strip() for s in block.group(1).split("&&") if not s.strip().startswith("python3 -m pip install")]
    if shutil.which("rtransform") is None or shutil.which("rammer") is None:
        pytest.skip("the rtransform and rammer commands are not installed (pip install -e .)")
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    res = subprocess.run(["bash", "-c", " && ".join(steps)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "check: PASS" in res.stdout


def test_convert_beside_the_source_never_replaces_a_hand_written_file(tmp_path: Path) -> None:
    """`rtransform convert x.cu` (no -o) writes x.rtask.cu beside the source: a file of the user's already there is
    kept byte for byte with one error line (exit 2); an earlier conversion there is replaced."""
    import shutil
    src = tmp_path / "softmax.cu"
    shutil.copy(REPO / "examples" / "softmax.cu", src)
    mine = tmp_path / "softmax.rtask.cu"
    mine.write_text("// my own rTask version, written by hand\n")
    res = CliRunner().invoke(rtransform_main, ["convert", str(src)])
    assert res.exit_code == Exit.USAGE and mine.read_text() == "// my own rTask version, written by hand\n"
    assert "not written by rtransform convert" in res.output and len(res.output.strip().splitlines()) == 1
    mine.unlink()
    for _ in range(2):  # the first writes it, the second replaces its own output
        res = CliRunner().invoke(rtransform_main, ["convert", str(src)])
        assert res.exit_code == 0, res.output
    assert mine.read_text().startswith('#include "rtask_runtime.cuh"')


def test_cache_clear_help_names_every_part() -> None:
    """`rammer cache clear --help` lists the parts PART may be: every one toolchain.cache knows (a part added to
    the cache without the help went unnoticed twice)."""
    from toolchain.cache import PARTS
    code, out = invoke(rammer_main, "cache", "clear", "--help")
    assert code == 0 and all(part in out for part in PARTS), out
