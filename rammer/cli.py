"""`rammer`: compile an ONNX model into persistent rPrograms (build), run and check it, plan only, benchmark it,
write the zoo's models, and look after the cache."""
from __future__ import annotations

import io
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

from kernel_corpus.bindings import DEFAULT_PRECISION, PRECISIONS
from scheduler.graph import SchedulerError
from scheduler.onnx_import import first_line
from scheduler.passes import PASSES
from scheduler.policies import POLICIES
from cuda_emu.options import emulator_limits, sanitize_option
from toolchain import package_version
from toolchain.files import InputError, Inputs, OutputError, load_npz, write_atomic
from toolchain.messages import whole_message

from .build import PROFILES, build_model
from .check import ATOL, RTOL, check_output, reference_outputs
from .runtime import MANIFEST, BuildError, load

PASS_NAMES = [p.name for p in PASSES]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_version(), prog_name="rammer")
def main() -> None:
    """rammer: compile an ONNX model into persistent rPrograms, run, check and benchmark it.

    Building and running compile and execute kernel code natively (g++ for the CPU emulator, NVRTC on a GPU);
    `--corpus DIR` imports and runs DIR/ops/*.py. Build only models and corpora you trust."""


@main.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option("--corpus", type=click.Path(file_okay=False), default=None,
              help="kernel corpus (default: built-in); its ops/*.py are imported and run")
@click.option("--policy", type=click.Choice(sorted(POLICIES)), default="wavefront", show_default=True)
@click.option("--target", type=click.Choice(["gpu", "cpu"]), default=None,
              help="where the build runs [default: gpu when one is visible, else cpu]")
@click.option("--veus", type=int, default=None, help="number of vEUs (default: what fits the target)")
@click.option("--veus-per-sm", "veus_per_sm", type=click.IntRange(1, 4), default=None,
              help="size weight-stationary slices for this many vEUs sharing an SM (default: a GPU build without "
                   "--veus tries 1-4 and keeps the fastest predicted; else ceil(vEUs / 132) on a GPU, 1 on the CPU)")
@click.option("--profile", type=click.Choice(PROFILES), default="auto", show_default=True,
              help="rTask times: measured on the device (cached per device), the cost model, or measured when a "
                   "GPU build has a GPU")
@click.option("--disable-pass", "disable_passes", multiple=True, metavar="NAME",
              help=f"leave a graph pass out (repeatable): {', '.join(PASS_NAMES)}")
@click.option("--dump-after", "dump_after", multiple=True, metavar="NAME",
              help="write the graph after this pass as OUT_DIR/after-NAME.onnx (repeatable; open it in Netron)")
@click.option("--backends", default=None, metavar="LIST",
              help="comma-separated backends nodes may run on: rtask, library, user (default: every one available "
                   "on the target; user only with --user-lib)")
@click.option("--placement", type=click.Choice(["dp", "search", "rtask-only"]), default=None,
              help="how each node's backend is chosen (default: search when some node has a choice)")
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
def build(model: str, out_dir: str, corpus: str | None, policy: str, target: str | None, veus: int | None,
          veus_per_sm: int | None, profile: str, disable_passes: tuple[str, ...], dump_after: tuple[str, ...],
          backends: str | None,
          placement: str | None, merge: str, user_libs: tuple[str, ...], precision: str, strict: bool,
          as_json: bool) -> None:
    """Build MODEL.onnx into OUT_DIR (program, plan.json, weights, timeline.json/.svg, report).

    A node no rKernel implements runs as a library step (a vendor call; on the CPU target any standard ONNX op
    through onnxruntime), listed in report.md as a kernel to write; --strict refuses it instead."""
    if strict:
        if placement not in (None, "rtask-only"):
            click.echo(f"error: --strict and --placement {placement} contradict each other", err=True)
            sys.exit(2)
        placement = "rtask-only"
    sys.exit(build_command(model, out_dir, corpus=corpus, policy=policy, target=target, veus=veus, profile=profile,
                           disable_passes=disable_passes, dump_after=dump_after, as_json=as_json,
                           backends=backends, placement=placement, user_libs=user_libs, merge=merge,
                           precision=precision, veus_per_sm=veus_per_sm))


@main.command("run")
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--inputs", type=click.Path(dir_okay=False), default=None, help="inputs (.npz); default random")
@click.option("--check", is_flag=True, help="compare every output with onnxruntime")
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
@click.option("--policy", type=click.Choice(sorted(POLICIES)), default="wavefront", show_default=True)
@click.option("--veus", type=int, default=None, help="vEUs of the vDevice (default: the H100's SM count)")
@click.option("--profile", type=click.Choice(PROFILES), default="model", show_default=True,
              help="rTask times: the cost model, or measured on the GPU (cached; auto: when one is visible)")
@click.option("-o", "--out", default=None, type=click.Path(dir_okay=False), help="write plan.json here")
@click.option("--json", "as_json", is_flag=True, help="print the plan's summary as JSON")
def plan(model: str, policy: str, veus: int | None, profile: str, out: str | None, as_json: bool) -> None:
    """Plan MODEL with one policy and print the prediction (no conversion, no code generation)."""
    from .plan import plan_command
    sys.exit(plan_command(model, policy, veus, profile, out, as_json=as_json))


@main.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--target", type=click.Choice(["gpu", "cpu"]), default="gpu", show_default=True)
@click.option("--backends", default=None, metavar="LIST", help="backends to profile (default: all available)")
@click.option("--veus", type=int, default=None, help="vEUs the rKernel shapes are measured on")
@click.option("--runs", type=int, default=50, show_default=True, help="runs per library call (median)")
@click.option("--rtasks", is_flag=True, help="on --target cpu, also time rKernel shapes on the emulator")
@click.option("--user-lib", "user_libs", multiple=True, type=click.Path(file_okay=False), metavar="FOLDER")
@click.option("--json", "as_json", is_flag=True)
def profile(model: str, target: str, backends: str | None, veus: int | None, runs: int, rtasks: bool,
            user_libs: tuple[str, ...], as_json: bool) -> None:
    """Fill the profile cache (device, backend, op, shapes, variant) for MODEL ahead of a build."""
    from .profile import profile_command
    sys.exit(profile_command(model, target, backends, veus, runs, rtasks, user_libs, as_json))


@main.command()
@click.argument("name", required=False)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None)
@click.option("--batch", type=int, default=1, show_default=True)
@click.option("--small", is_flag=True, help="a reduced size that runs on the CPU emulator")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--list", "list_", is_flag=True, help="list the models")
def zoo(name: str | None, output: str | None, batch: int, small: bool, seed: int, list_: bool) -> None:
    """Write one of the benchmark models as ONNX."""
    from .zoo import zoo_command
    sys.exit(zoo_command(name, output, batch, small, seed, list_))


@main.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--batch", type=int, default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.option("--repeats", type=int, default=100, show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="keep the rammer builds here (timeline.svg, report.md per policy); default: a temporary folder")
def bench(model: str, batch: int, as_json: bool, repeats: int, out_dir: str | None) -> None:
    """Benchmark a model on the GPU: rammer vs op-by-op, CUDA Graph, PyTorch, torch.compile."""
    from .bench import bench_command
    sys.exit(bench_command(model, batch, as_json, repeats=repeats, out_dir=out_dir))


@main.group()
def cache() -> None:
    """The toolchain's cache ($RAMMER_CACHE, default ~/.cache/rammer): emulator builds, profiles, NVRTC stubs."""


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
    """Remove PART of the cache (emu, profiles, registers, sliced), or all of it (only the cache's own parts)."""
    from toolchain.cache import CacheError, clear
    try:
        freed = clear(part)
    except CacheError as exc:
        click.echo(f"rammer cache clear: {exc}", err=True)
        sys.exit(2)
    click.echo(f"freed {freed / 2**20:.1f} MiB")


def build_command(model: str, out_dir: str, corpus: str | None = None, policy: str = "wavefront",
                  target: str | None = None, veus: int | None = None, profile: str = "auto",
                  disable_passes: tuple[str, ...] = (), dump_after: tuple[str, ...] = (), as_json: bool = False,
                  backends: str | None = None, placement: str | None = None, user_libs: tuple[str, ...] = (),
                  merge: str = "auto", precision: str = DEFAULT_PRECISION, veus_per_sm: int | None = None) -> int:
    """CLI body of `rammer build`: one error line and exit 1 on failure, a summary (or, with --json, the build's
    stats as one JSON object on stdout) on success. Without --target: the GPU when one is visible, else the CPU."""
    from vdevice.gpu import gpu_available
    gpu, why = gpu_available()
    if target is None:
        target = "gpu" if gpu else "cpu"
        if not gpu:
            print(f"note: no GPU is visible ({first_line(why)}): building for --target cpu", file=sys.stderr)
    elif target == "gpu" and not gpu:
        print(f"note: no GPU is visible here ({first_line(why)}): the build is compiled with nvcc for the GPU and "
              f"will run only where one is (or rebuild with --target cpu)", file=sys.stderr)
    print(f"rammer build {model} -> {out_dir} (policy {policy}, target {target})", file=sys.stderr)
    try:
        names = default_backends(target, user_libs) if backends is None else \
            tuple(b.strip() for b in backends.split(",") if b.strip())
        built = build_model(model, out_dir, corpus, policy, target, veus, profile=profile, quiet=as_json,
                            disable_passes=disable_passes, dump_after=dump_after, backends=names,
                            placement=placement, user_libs=user_libs, merge=merge, precision=precision,
                            veus_per_sm=veus_per_sm)
    except SchedulerError as exc:
        print(_one_line(exc), file=sys.stderr)
        return 1
    except Exception as exc:  # the emulator's and converter's own errors: still one line, no traceback
        print(f"error: {type(exc).__name__}: {first_line(exc)}", file=sys.stderr)
        return 1
    s = built.manifest.stats
    if as_json:
        print(json.dumps({"folder": str(built.folder), "target": built.manifest.target, "policy": policy,
                          "num_veus": built.manifest.num_veus, **s}))
        return 0
    print(f"{built.folder}: {s['operators']} operators, {s['launches']} launches, {s['rtasks']} rTasks, "
          f"{s['programs']} rProgram(s), {s['library_calls']} library call(s), {s['barrier_rtasks']} barrier-rTasks "
          f"on {built.manifest.num_veus} vEUs, "
          + (f"predicted {s['predicted_us']:.1f} us, " if built.manifest.target == "gpu" else "")
          + f"built in {s['build_s']:.1f} s")
    return 0


def run_inputs(built: Any, inputs: str | None) -> Inputs:
    """What `rammer run` reads: the build folder (never written at or above), every file of it, the inputs file."""
    guard = Inputs().folder(built.folder, "the build folder")
    for f in [*built.manifest.files, MANIFEST]:
        guard.file(built.folder / f, "a file of the build")
    return guard.file(inputs, "the inputs")


def check_writable(path: str, guard: Inputs, option: str = "--save") -> Path:
    """Before the run: the output must not be over, into or above an input of the run, and its folder must exist
    and be writable; returns the real path to write."""
    try:
        return guard.check_file(path, option)
    except OutputError as exc:
        raise BuildError(str(exc)) from None


def default_backends(target: str, user_libs: tuple[str, ...]) -> tuple[str, ...]:
    """Every backend available on the target; user only when a library is given."""
    from scheduler.backends import available_backends
    return tuple(b for b in available_backends(target) if b != "user" or user_libs)


def _one_line(exc: Exception) -> str:
    """`FILE: error: ...` messages as they are, anything else prefixed with `error:`; first line only."""
    text = first_line(exc)
    return text if re.match(r"^\S+: error: ", text) else f"error: {text}"


def run_command(out_dir: str, inputs: str | None = None, check: bool = False, save: str | None = None,
                device: str | None = None, seed: int = 0, as_json: bool = False,
                sanitize: tuple[str, ...] = ()) -> int:
    """CLI body of `rammer run`: run once, print outputs (and errors vs onnxruntime with --check)."""
    backend = device or "cpu"
    try:
        built = load(out_dir)
        target = check_writable(save, run_inputs(built, inputs)) if save else None
        if inputs:
            want = {t.name: t.shape for t in built.manifest.inputs}
            try:
                feeds = load_npz(inputs, "inputs", want, sum(b.nbytes for b in built.manifest.buffers
                                                            if b.kind == "input") + 2**20)
            except InputError as exc:
                raise BuildError(str(exc)) from None
        else:
            rng = np.random.default_rng(seed)
            feeds = {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in built.manifest.inputs}
        backend = device or built.manifest.target
        if backend == "gpu":
            from vdevice.gpu import gpu_available
            ok, why = gpu_available()
            if not ok:
                raise BuildError(f"{why}; run with --device cpu or build with --target cpu")
        if sanitize and backend != "cpu":
            raise BuildError("error: --sanitize runs on the CPU emulator only; add --device cpu")
        t = time.perf_counter()
        outs = built.run(feeds, backend=backend, sanitize=sanitize) if sanitize else built.run(feeds, backend=backend)
        secs = time.perf_counter() - t
    except SchedulerError as exc:
        print(_one_line(exc), file=sys.stderr)
        return 1
    except Exception as exc:  # emulator watchdog, device errors: one line
        hint = ""
        if "out of memory" in str(exc) and backend == "cpu":
            hint = (f" (the emulator runs every thread of {built.manifest.num_veus} vEUs as a fiber: "
                    f"rebuild with --target cpu or fewer --veus)")
        print(f"error: {type(exc).__name__}: {whole_message(exc)}{hint}", file=sys.stderr)
        return 1
    say = (lambda *a: None) if as_json else print
    say(f"ran {out_dir} on {backend} in {secs:.3f} s (first run, compile included when not cached)")
    try:
        refs = dict(zip(built.output_names, reference_outputs(built.folder / "model.onnx",
                                                              built.check_inputs(feeds)))) if check else {}
    except Exception as exc:  # onnxruntime refusing the model or the inputs: one line, the run's outputs stand
        print(f"error: --check: onnxruntime cannot run {out_dir}/model.onnx on these inputs: "
              f"{first_line(exc)}", file=sys.stderr)
        return 1
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
            return 1
    ok = all(c.ok for c in checks)
    if check:
        worst = max(checks, key=lambda c: c.ratio) if checks else None
        tail = f"; worst {worst.name} at {list(worst.index or ())}, {worst.ratio:.3g}x its tolerance" if worst else ""
        say(f"check: {'PASS' if ok else 'FAIL'} (every element within {ATOL:g} + {RTOL:g}*|onnxruntime|{tail})")
        report["check"] = {"pass": ok, "rtol": RTOL, "atol": ATOL,
                           "worst_ratio": worst.ratio if worst else 0.0}
    if as_json:
        print(json.dumps(report))
    return 0 if ok or not check else 1
