"""`rammer`: compile an ONNX model into persistent rPrograms (build), run and check it, plan only, benchmark it,
write the zoo's models, and look after the cache."""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any, Callable

import click

from cuda_emu.options import emulator_limits, sanitize_option
from kernel_corpus.bindings import DEFAULT_PRECISION, PRECISIONS
from toolchain import package_version
from toolchain.clitypes import LazyChoice
from toolchain.exits import Exit

# Start-up stays light (`rammer --version`, `--help`): numpy, onnx and the compiler stack load inside commands.


def _policies() -> list[str]:
    from scheduler.policies import POLICIES
    return sorted(POLICIES)


def _profiles() -> tuple[str, ...]:
    from .build import PROFILES
    return PROFILES


class CommandError(Exception):
    """A command that stops: str() is its one line, .code its exit status (toolchain.exits.Exit)."""

    def __init__(self, message: str, code: int = Exit.FAILED) -> None:
        super().__init__(message)
        self.code = code


TARGET_HELP = "where the build runs: gpu, or cpu (the CPU emulator) [default: gpu when one is visible, else cpu]"
PROFILE_HELP = ("rTask times: measured on the GPU (cached per device), the cost model, or auto: measured when a GPU "
                "build has a GPU")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_version(), prog_name="rammer")
def main() -> None:
    """rammer: compile an ONNX model into persistent rPrograms, run, check and benchmark it.

    Building and running compile and execute kernel code natively (g++ for the CPU emulator, NVRTC on a GPU);
    `--corpus DIR` imports and runs DIR/ops/*.py. Build only models and corpora you trust.

    Exit status: 0 ok, 1 failed (a check mismatch, a refused node, a build or run error), 2 bad command line or
    input, 3 this machine lacks what the command needs (a GPU, torch)."""


def _at_least_one_veu(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    """--veus below 1 is bad input: one `error:` line and exit 2 before any work, as the other CLI errors."""
    if value is not None and value < 1:
        click.echo(f"error: --veus must be >= 1, got {value}", err=True)
        ctx.exit(Exit.USAGE)
    return value


def _dims(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    """--dim NAME=N (repeatable) as ((name, size), ...); one usage line for a malformed one (a size below 1 is
    fix_dimensions' to refuse)."""
    out = []
    for item in values:
        name, sep, size = item.rpartition("=")
        if not sep or not name or not size.isdigit():
            click.echo(f"error: --dim {item}: expected NAME=N with N >= 1 (a named dynamic dimension of the model, "
                       f"e.g. --dim batch=1)", err=True)
            ctx.exit(Exit.USAGE)
        out.append((name, int(size)))
    return tuple(out)


def dim_option(command: Callable) -> Callable:
    """--dim NAME=N: the size of one of the model's named dynamic dimensions (an exporter's "batch", "seq")."""
    return click.option("--dim", "dims", multiple=True, callback=_dims, metavar="NAME=N",
                        help="give the model's dynamic dimension NAME (an exporter's batch or sequence axis) the "
                             "size N (repeatable); the scheduler needs static shapes")(command)


@main.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False),
              help="the build folder to write (created; a rebuild keeps your own files in it)")
@click.option("--corpus", type=click.Path(file_okay=False), default=None,
              help="kernel corpus (default: built-in); its ops/*.py are imported and run")
@click.option("--policy", type=LazyChoice(_policies), default="wavefront", show_default=True,
              help="how rTasks are placed on vEUs: wavefront, ios (IOS's stage search) or sequential")
@click.option("--target", type=click.Choice(["gpu", "cpu"]), default=None, help=TARGET_HELP)
@click.option("--veus", type=int, default=None, callback=_at_least_one_veu,
              help="number of vEUs (default: what fits the target)")
@click.option("--veus-per-sm", "veus_per_sm", type=click.IntRange(1, 4), default=None,
              help="size weight-stationary slices for this many vEUs sharing an SM (default: a GPU build without "
                   "--veus tries 1-4 and keeps the fastest predicted; else ceil(vEUs / 132) on a GPU, 1 on the CPU)")
@click.option("--profile", type=LazyChoice(_profiles), default="auto", show_default=True, help=PROFILE_HELP)
@click.option("--disable-pass", "disable_passes", multiple=True, metavar="NAME",
              help="leave a graph pass out (repeatable; an unknown NAME is refused with the list of passes)")
@click.option("--dump-after", "dump_after", multiple=True, metavar="NAME",
              help="write the graph after this pass as OUT_DIR/after-NAME.onnx (repeatable; open it in Netron)")
@click.option("--backends", default=None, metavar="LIST",
              help="comma-separated backends nodes may run on: rtask, library, user (default: every one available "
                   "on the target; user only with --user-lib)")
@click.option("--placement", type=click.Choice(["dp", "search", "rtask-only", "launch-only"]), default=None,
              help="how each node's backend is chosen (default: search when some node has a choice); launch-only: "
                   "every node as its fastest legacy kernel in launch segments (a CUDA Graph of them)")
@click.option("--launch-segments/--no-launch-segments", "launches", default=None,
              help="let nodes run outside the rPrograms as launch segments (their legacy kernels in a CUDA Graph) "
                   "where that is predicted faster [default: on for --target gpu, off for cpu]")
@click.option("--force", "force", multiple=True, metavar="PATTERN=KIND",
              help="node names matching PATTERN (fnmatch) run as KIND: rtask (in rPrograms), launch or library "
                   "(repeatable; the first matching pattern wins)")
@click.option("--merge", type=click.Choice(["auto", "off", "always"]), default="auto", show_default=True,
              help="IOS merge of sibling Convs/MatMuls sharing an input: where it wins by the profiler, never, always")
@click.option("--user-lib", "user_libs", multiple=True, type=click.Path(file_okay=False), metavar="FOLDER",
              help="a user kernel library: .cu files + bindings.yaml (repeatable; enables the user backend)")
@click.option("--precision", type=click.Choice(PRECISIONS), default=DEFAULT_PRECISION, show_default=True,
              help="the least accurate arithmetic kernels may use: fp32 (CUDA cores), 3xtf32 (tensor cores at float32 "
                   "accuracy), tf32, bf16; the profiler picks the fastest allowed kernel per operator")
@click.option("--strict", is_flag=True,
              help="everything in rPrograms: refuse a node no rKernel implements instead of running it as a library "
                   "step (vendor call, or onnxruntime on the CPU); the same as --placement rtask-only")
@click.option("--json", "as_json", is_flag=True, help="print the build's summary (build.json's stats) as JSON")
@dim_option
def build(model: str, out_dir: str, corpus: str | None, policy: str, target: str | None, veus: int | None,
          veus_per_sm: int | None, profile: str, disable_passes: tuple[str, ...], dump_after: tuple[str, ...],
          backends: str | None,
          placement: str | None, launches: bool | None, force: tuple[str, ...], merge: str,
          user_libs: tuple[str, ...], precision: str, strict: bool, as_json: bool,
          dims: tuple[tuple[str, int], ...]) -> None:
    """Build MODEL.onnx into OUT_DIR (program, plan.json, weights, timeline.json/.svg, report).

    A node no rKernel implements runs as a library step (a vendor call; on the CPU target any standard ONNX op
    through onnxruntime), listed in report.md as a kernel to write; --strict refuses it instead. MODEL's external
    data files are read from MODEL's folder, and OUT_DIR gets a model.onnx that needs nothing outside it."""
    if strict:
        if placement not in (None, "rtask-only"):
            click.echo(f"error: --strict and --placement {placement} contradict each other", err=True)
            sys.exit(Exit.USAGE)
        placement = "rtask-only"
    sys.exit(build_command(model, out_dir, corpus=corpus, policy=policy, target=target, veus=veus, profile=profile,
                           disable_passes=disable_passes, dump_after=dump_after, as_json=as_json,
                           backends=backends, placement=placement, user_libs=user_libs, merge=merge,
                           precision=precision, veus_per_sm=veus_per_sm, launches=launches, force=force, dims=dims))


@main.command("run")
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--inputs", type=click.Path(dir_okay=False), default=None, help="inputs (.npz); default random")
@click.option("--check", is_flag=True, help="compare every output with onnxruntime (exit 1 when one differs)")
@click.option("--save", type=click.Path(dir_okay=False), default=None, help="save outputs (.npz)")
@click.option("--device", type=click.Choice(["gpu", "cpu"]), default=None,
              help="where to run (default: the build's --target)")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the random inputs")
@click.option("--json", "as_json", is_flag=True, help="print the result (outputs' shapes, errors, verdict) as JSON")
@sanitize_option("none")
@emulator_limits
def run(out_dir: str, inputs: str | None, check: bool, save: str | None, device: str | None, seed: int,
        as_json: bool, sanitize: tuple[str, ...]) -> None:
    """Run a built model once (random inputs unless --inputs), optionally checked against onnxruntime.

    On the CPU, --sanitize runs the whole persistent program under the emulator's sanitizers."""
    sys.exit(run_command(out_dir, inputs=inputs, check=check, save=save, device=device, seed=seed, as_json=as_json,
                         sanitize=sanitize))


@main.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--policy", type=LazyChoice(_policies), default="wavefront", show_default=True,
              help="how rTasks are placed on vEUs: wavefront, ios (IOS's stage search) or sequential")
@click.option("--veus", type=int, default=None, callback=_at_least_one_veu,
              help="vEUs of the vDevice (default: the H100's SM count)")
@click.option("--profile", type=LazyChoice(_profiles), default="auto", show_default=True, help=PROFILE_HELP)
@click.option("-o", "--out", default=None, type=click.Path(dir_okay=False), help="write plan.json here")
@click.option("--json", "as_json", is_flag=True, help="print the plan's summary as JSON")
@dim_option
def plan(model: str, policy: str, veus: int | None, profile: str, out: str | None, as_json: bool,
         dims: tuple[tuple[str, int], ...]) -> None:
    """Plan MODEL for the GPU with one policy and print the prediction (no conversion, no code generation)."""
    from .plan import plan_command
    sys.exit(plan_command(model, policy, veus, profile, out, as_json=as_json, dims=dict(dims)))


@main.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--target", type=click.Choice(["gpu", "cpu"]), default=None, help=TARGET_HELP)
@click.option("--backends", default=None, metavar="LIST", help="backends to profile (default: all available)")
@click.option("--veus", type=int, default=None, callback=_at_least_one_veu,
              help="vEUs the rKernel shapes are measured on")
@click.option("--runs", type=int, default=50, show_default=True, help="runs per library call (median)")
@click.option("--rtasks", is_flag=True, help="on --target cpu, also time rKernel shapes on the emulator")
@click.option("--user-lib", "user_libs", multiple=True, type=click.Path(file_okay=False), metavar="FOLDER",
              help="a user kernel library to profile as well: .cu files + bindings.yaml (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="print the cache sizes and hits as JSON")
def profile(model: str, target: str | None, backends: str | None, veus: int | None, runs: int, rtasks: bool,
            user_libs: tuple[str, ...], as_json: bool) -> None:
    """Fill the profile cache (device, backend, op, shapes, variant) for MODEL ahead of a build."""
    from .profile import profile_command
    try:
        target = resolve_target(target, "profiling")
    except CommandError as exc:
        click.echo(str(exc), err=True)
        sys.exit(exc.code)
    sys.exit(profile_command(model, target, backends, veus, runs, rtasks, user_libs, as_json))


@main.command()
@click.argument("name", required=False)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="the ONNX file to write")
@click.option("--batch", type=int, default=1, show_default=True, help="the model's batch size")
@click.option("--small", is_flag=True, help="a reduced size that runs on the CPU emulator")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the random weights")
@click.option("--list", "list_", is_flag=True, help="list the models")
@click.option("--force", is_flag=True, help="replace an existing -o file that rammer zoo did not write (refused "
              "otherwise)")
def zoo(name: str | None, output: str | None, batch: int, small: bool, seed: int, list_: bool, force: bool) -> None:
    """Write one of the benchmark models as ONNX."""
    from .zoo import zoo_command
    sys.exit(zoo_command(name, output, batch, small, seed, list_, force))


def _export_models() -> list[str]:
    from .export import MODELS
    return list(MODELS)


@main.command("export")
@click.argument("names", nargs=-1, type=LazyChoice(_export_models), metavar="[NAME]...")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False),
              help="folder for NAME.onnx (and NAME.onnx.data, its weights, as torch writes them)")
@click.option("--check", is_flag=True,
              help="also build each model (into OUT/NAME-build) and compare it with onnxruntime (exit 1 if any differ)")
@click.option("--target", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True,
              help="the target of the --check builds")
@click.option("--exporter", type=click.Choice(["auto", "dynamo", "torchscript"]), default="auto",
              show_default=True,
              help="torch.onnx.export's dynamo exporter (needs onnxscript), its TorchScript one (opset 17), or auto: "
                   "dynamo when onnxscript is installed")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the random weights")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object per model")
def export(names: tuple[str, ...], out_dir: str, check: bool, target: str, exporter: str, seed: int,
           as_json: bool) -> None:
    """Export PyTorch models (torchvision-style CNNs, a BERT-style encoder, a speech RNN; random weights) to ONNX:
    the models as users bring them, to build with `rammer build`. Every model without NAME. Needs torch (the
    `bench` extra: pip install -e '.[bench]')."""
    from .export import export_command
    sys.exit(export_command(names, out_dir, check, target, exporter, seed, as_json))


@main.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--batch", type=int, default=1, show_default=True, help="batch size (fixes the model's symbolic dims)")
@click.option("--json", "as_json", is_flag=True, help="print the results as JSON")
@click.option("--repeats", type=int, default=100, show_default=True, help="timed runs per variant (median)")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="keep the rammer builds here (timeline.svg, report.md per policy); default: a temporary folder")
@click.option("--kernels", is_flag=True,
              help="also time each GEMM / convolution's kernels alone against cuBLAS / cuDNN (TFLOP/s)")
def bench(model: str, batch: int, as_json: bool, repeats: int, out_dir: str | None, kernels: bool) -> None:
    """Benchmark a model on the GPU: rammer vs op-by-op, CUDA Graph, PyTorch, torch.compile."""
    from .bench import bench_command
    sys.exit(bench_command(model, batch, as_json, repeats=repeats, out_dir=out_dir, kernels=kernels))


@main.group()
def cache() -> None:
    """The toolchain's cache ($RAMMER_CACHE, else $XDG_CACHE_HOME/rammer or ~/.cache/rammer): emulator builds,
    profiles, NVRTC stubs."""


@cache.command("info")
def cache_info() -> None:
    """Where the cache is and what each part of it holds."""
    from toolchain.cache import cache_root, usage
    parts = usage()
    click.echo(f"cache root: {cache_root()}")
    for name, (files, nbytes) in parts.items():
        click.echo(f"  {name:14s} {files:6d} files {nbytes / 2**20:10.1f} MiB")
    total = sum(b for _, b in parts.values())
    click.echo(f"  {'total':14s} {sum(f for f, _ in parts.values()):6d} files {total / 2**20:10.1f} MiB")


@cache.command("clear")
@click.argument("part", required=False)
def cache_clear(part: str | None) -> None:
    """Remove PART of the cache (emu, nvrtc, pch, profiles, registers, sliced), or all of it (only its own parts)."""
    from toolchain.cache import CacheError, clear
    try:
        freed = clear(part)
    except CacheError as exc:
        click.echo(f"rammer cache clear: {exc}", err=True)
        sys.exit(Exit.USAGE)
    click.echo(f"freed {freed / 2**20:.1f} MiB")


def resolve_target(target: str | None, what: str) -> str:
    """The target a command runs for: the given one, else the GPU when one is visible and the CPU otherwise (said
    in a note); --target gpu without a GPU is refused for work that must run there (exit 3)."""
    from scheduler.onnx_import import first_line
    from vdevice.gpu import gpu_available
    gpu, why = gpu_available()
    if target is None:
        if not gpu:
            print(f"note: no GPU is visible ({first_line(why)}): {what} for --target cpu", file=sys.stderr)
        return "gpu" if gpu else "cpu"
    if target == "gpu" and not gpu and what != "building":
        raise CommandError(f"error: no GPU is visible ({first_line(why)}): {what} with --target gpu needs one "
                           f"(use --target cpu)", Exit.MISSING)
    if target == "gpu" and not gpu:
        print(f"note: no GPU is visible here ({first_line(why)}): the build is compiled with nvcc for the GPU and "
              f"will run only where one is (or rebuild with --target cpu)", file=sys.stderr)
    return target


def build_command(model: str, out_dir: str, corpus: str | None = None, policy: str = "wavefront",
                  target: str | None = None, veus: int | None = None, profile: str = "auto",
                  disable_passes: tuple[str, ...] = (), dump_after: tuple[str, ...] = (), as_json: bool = False,
                  backends: str | None = None, placement: str | None = None, user_libs: tuple[str, ...] = (),
                  merge: str = "auto", precision: str = DEFAULT_PRECISION, veus_per_sm: int | None = None,
                  launches: bool | None = None, force: tuple[str, ...] = (),
                  dims: tuple[tuple[str, int], ...] = ()) -> int:
    """CLI body of `rammer build`: one error line on failure (exit 2 for a model that cannot be read, else 1), a
    summary (or, with --json, the build's stats as one JSON object on stdout) on success. Without --target: the
    GPU when one is visible, else the CPU."""
    import json

    from scheduler.graph import SchedulerError
    from scheduler.onnx_import import ModelError, first_line

    from scheduler.passes import check_pass_names

    from .build import BuildOptions, build_model
    from .build_output import OutputRefused
    try:
        check_pass_names(list(disable_passes) + list(dump_after))
    except SchedulerError as exc:
        print(_one_line(exc), file=sys.stderr)
        return Exit.USAGE
    target = resolve_target(target, "building")
    if target == "gpu" and profile == "measured":
        try:
            resolve_target("gpu", "measuring rTask times (--profile measured)")
        except CommandError as exc:
            print(str(exc), file=sys.stderr)
            return exc.code
    print(f"rammer build {model} -> {out_dir} (policy {policy}, target {target})", file=sys.stderr)
    try:
        names = default_backends(target, user_libs) if backends is None else \
            tuple(b.strip() for b in backends.split(",") if b.strip())
        options = BuildOptions(target, veus, veus_per_sm, policy, profile, precision, names, user_libs, placement,
                               merge, corpus, disable_passes, dump_after, launches=launches, force=tuple(force),
                               dims=tuple(dims))
        built = build_model(model, out_dir, options, quiet=as_json)
    except (ModelError, OutputRefused) as exc:  # an unreadable model, an output the guard refuses: usage
        print(_one_line(exc), file=sys.stderr)
        return Exit.USAGE
    except SchedulerError as exc:
        print(_one_line(exc), file=sys.stderr)
        return Exit.FAILED
    except Exception as exc:  # the emulator's and converter's own errors: still one line, no traceback
        print(f"error: {type(exc).__name__}: {first_line(exc)}", file=sys.stderr)
        return Exit.FAILED
    s = built.manifest.stats
    if as_json:
        print(json.dumps({"folder": str(built.folder), "target": built.manifest.target, "policy": policy,
                          "num_veus": built.manifest.veus, **s}))
        return Exit.OK
    print(f"{built.folder}: {s['operators']} operators, {s['launches']} launches, {s['rtasks']} rTasks, "
          f"{s['programs']} rProgram(s), {s.get('launch_segments', 0)} launch segment(s) of "
          f"{s.get('launched_ops', 0)} launch(es), {s['library_calls']} library call(s), "
          f"{s['barrier_rtasks']} barrier-rTasks on {built.manifest.veus} vEUs, "
          + (f"predicted {s['predicted_us']:.1f} us, " if built.manifest.target == "gpu" else "")
          + f"built in {s['build_s']:.1f} s")
    return Exit.OK


def run_inputs(built: Any, inputs: str | None) -> Any:
    """What `rammer run` reads: the build folder (never written at or above), every file of it, the inputs file."""
    from toolchain.files import Inputs

    from .runtime import MANIFEST
    guard = Inputs().folder(built.folder, "the build folder")
    for f in [*built.manifest.files, MANIFEST]:
        guard.file(built.folder / f, "a file of the build")
    return guard.file(inputs, "the inputs")


def check_writable(path: str, guard: Any, option: str = "--save") -> Path:
    """Before the run: the output must not be over, into or above an input of the run (toolchain.files' guard), and
    its folder must exist and be writable; returns the real path to write."""
    from toolchain.files import OutputError
    try:
        return guard.check_file(path, option)
    except OutputError as exc:
        raise CommandError(str(exc), Exit.USAGE) from None


def default_backends(target: str, user_libs: tuple[str, ...]) -> tuple[str, ...]:
    """Every backend available on the target (those that take libraries only when some are given)."""
    from scheduler.backends import available_backends
    return tuple(available_backends(target, with_libraries=bool(user_libs)))


def _one_line(exc: Exception) -> str:
    """`FILE: error: ...` messages as they are, anything else prefixed with `error:`; first line only."""
    from scheduler.onnx_import import first_line
    text = first_line(exc)
    return text if re.match(r"^\S+: error: ", text) else f"error: {text}"


def read_feeds(built: Any, inputs: str | None, seed: int) -> dict:
    """The run's inputs: the .npz file given (exit 2 when unreadable), else seeded random ones of the model's
    shapes."""
    import numpy as np
    if inputs:
        from toolchain.files import InputError, load_npz
        want = {t.name: t.shape for t in built.manifest.inputs}
        limit = sum(b.nbytes for b in built.manifest.buffers if b.kind == "input") + 2**20
        try:  # every member checked by its declared header before any is loaded
            return load_npz(inputs, "inputs", want, limit)
        except InputError as exc:
            raise CommandError(str(exc), Exit.USAGE) from None
    rng = np.random.default_rng(seed)
    return {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in built.manifest.inputs}


def run_device(built: Any, device: str | None, sanitize: tuple[str, ...]) -> str:
    """Where the run happens: --device, else the build's target; a GPU that is not there exits 3."""
    backend = device or built.manifest.target
    if backend == "gpu":
        from vdevice.gpu import gpu_available
        ok, why = gpu_available()
        if not ok:
            raise CommandError(f"error: {why}; run with --device cpu or build with --target cpu", Exit.MISSING)
    if sanitize and backend != "cpu":
        raise CommandError("error: --sanitize runs on the CPU emulator only; add --device cpu", Exit.USAGE)
    return backend


def run_command(out_dir: str, inputs: str | None = None, check: bool = False, save: str | None = None,
                device: str | None = None, seed: int = 0, as_json: bool = False,
                sanitize: tuple[str, ...] = ()) -> int:
    """CLI body of `rammer run`: run once, print outputs (and errors vs onnxruntime with --check). Exit 2 for a
    folder that is no build or unreadable inputs, 3 without the GPU it needs, 1 for a failed run or check."""
    import io
    import json

    import numpy as np

    from scheduler.graph import SchedulerError
    from toolchain.files import write_atomic
    from toolchain.messages import whole_message

    from scheduler.onnx_import import first_line

    from .check import ATOL, RTOL, check_output, reference_outputs
    from .runtime import load
    try:
        try:
            built = load(out_dir)
        except SchedulerError as exc:
            raise CommandError(_one_line(exc), Exit.USAGE) from None
        target = check_writable(save, run_inputs(built, inputs)) if save else None
        feeds = read_feeds(built, inputs, seed)
        try:
            built.check_inputs(feeds)
        except SchedulerError as exc:
            raise CommandError(_one_line(exc), Exit.USAGE) from None
        backend = run_device(built, device, sanitize)
    except CommandError as exc:
        print(str(exc), file=sys.stderr)
        return exc.code
    try:
        t = time.perf_counter()
        outs = built.run(feeds, backend=backend, sanitize=sanitize) if sanitize else built.run(feeds, backend=backend)
        secs = time.perf_counter() - t
    except SchedulerError as exc:
        print(_one_line(exc), file=sys.stderr)
        return Exit.FAILED
    except Exception as exc:  # emulator watchdog, device errors: one line
        hint = ""
        if "out of memory" in str(exc) and backend == "cpu":
            hint = (f" (the emulator runs every thread of {built.manifest.veus} vEUs as a fiber: "
                    f"rebuild with --target cpu or fewer --veus)")
        print(f"error: {type(exc).__name__}: {whole_message(exc)}{hint}", file=sys.stderr)
        return Exit.FAILED
    say = (lambda *a: None) if as_json else print
    say(f"ran {out_dir} on {backend} in {secs:.3f} s (first run, compile included when not cached)")
    try:
        refs = dict(zip(built.output_names, reference_outputs(built.folder / "model.onnx",
                                                              built.check_inputs(feeds)))) if check else {}
    except Exception as exc:  # onnxruntime refusing the model or the inputs: one line
        print(f"error: --check: onnxruntime cannot run {out_dir}/model.onnx on these inputs: "
              f"{first_line(exc)}", file=sys.stderr)
        return Exit.FAILED
    report: dict = {"folder": str(out_dir), "device": backend, "seconds": round(secs, 4), "outputs": []}
    checks = []
    for name, arr in outs.items():
        line = f"  {name}: shape {list(arr.shape)} mean {float(np.mean(arr)):.6g}"
        entry = {"name": name, "shape": list(arr.shape), "mean": float(np.mean(arr))}
        if check:
            c = check_output(name, arr, refs[name])
            checks.append(c)
            line += f"\n    check: {c.line()}"
            entry["check"] = {"pass": c.ok, "worst_ratio": c.ratio, "worst_index": list(c.index or ()),
                              "got": c.got, "want": c.want, "elements_off": c.bad}
            if c.nonfinite:
                entry["nonfinite_mismatch"] = c.nonfinite
        say(line)
        report["outputs"].append(entry)
    if target is not None:
        try:
            buf = io.BytesIO()
            np.savez(buf, **outs)
            write_atomic(target, buf.getvalue())
        except OSError as exc:
            print(f"{save}: error: cannot save the outputs: {exc.strerror or exc}", file=sys.stderr)
            return Exit.FAILED
    ok = all(c.ok for c in checks)
    if check:
        worst = max(checks, key=lambda c: c.ratio) if checks else None
        tail = f"; worst {worst.name} at {list(worst.index or ())}, {worst.ratio:.3g}x its tolerance" if worst else ""
        say(f"check: {'PASS' if ok else 'FAIL'} (every element within {ATOL:g} + {RTOL:g}*|onnxruntime|{tail})")
        report["check"] = {"pass": ok, "rtol": RTOL, "atol": ATOL, "worst_ratio": worst.ratio if worst else 0.0}
    if as_json:
        print(json.dumps(report))
    return Exit.OK if ok or not check else Exit.FAILED


if __name__ == "__main__":
    main()
