"""Command lines: `rtransform` (kernels) and `rammer` (models)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

RUNTIME_INCLUDE = Path(__file__).resolve().parent.parent / "vdevice" / "include"


def _fail(lines: list[str], code: int = 1) -> None:
    for line in lines:
        click.echo(line, err=True)
    sys.exit(code)


def metadata_path(out_cu: Path) -> Path:
    """Where the rKernel metadata of a converted file lives: beside it, `NAME.rkernels.json`."""
    return out_cu.with_name(out_cu.stem + ".rkernels.json")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """rtransform: turn legacy CUDA kernels into rKernels and check them."""


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="converted source (default: FILE with suffix .rtask.cu; '-' for stdout)")
@click.option("--kernel", "kernels", multiple=True, help="convert only this kernel (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="print the rKernel metadata as JSON on stdout")
def convert(file: str, output: str | None, kernels: tuple[str, ...], as_json: bool) -> None:
    """Convert the __global__ kernels of FILE into rKernels (+ plain wrappers and metadata)."""
    from converter import ConversionError, convert_file, write_atomic
    try:
        res = convert_file(file, list(kernels) or None, strict=True)
    except ConversionError as e:
        _fail(e.diagnostics)
    for w in res.warnings:
        click.echo(w, err=True)
    meta = {"source": file, "rkernels": res.rkernels, "refused": res.refused}
    if output == "-":
        click.echo(res.output, nl=False)
    else:
        out = Path(output) if output else Path(file).with_suffix(".rtask.cu")
        write_atomic(metadata_path(out), json.dumps(meta, indent=2) + "\n")
        write_atomic(out, res.output)
        if not as_json:
            names = ", ".join(m["name"] for m in res.rkernels)
            click.echo(f"{file}: {len(res.rkernels)} rKernel(s) ({names}) -> {out}", err=True)
    if as_json:
        click.echo(json.dumps(meta, indent=2))


@main.command("include-dir")
def include_dir() -> None:
    """Print the folder holding rtask_runtime.cuh (pass it with -I when compiling converted files)."""
    click.echo(str(RUNTIME_INCLUDE))


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--spec", required=True, type=click.Path(dir_okay=False), help="launch spec (YAML)")
@click.option("--converted", is_flag=True, help="run the converted rKernel through its plain wrapper")
@click.option("--device", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True)
@click.option("--save", type=click.Path(dir_okay=False), help="save in.NAME / out.NAME arrays (.npz)")
def run(file: str, spec: str, converted: bool, device: str, save: str | None) -> None:
    """Run one kernel of FILE as the spec says (legacy, or converted with --converted)."""
    from rtransform.run import run_command
    sys.exit(run_command(file, spec, converted=converted, device=device, save=save))


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--spec", required=True, type=click.Path(dir_okay=False), help="launch spec (YAML)")
@click.option("--device", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="machine-readable result")
def verify(file: str, spec: str, device: str, as_json: bool) -> None:
    """Convert, run legacy and rKernel (persistent, shuffled, surplus threads) and compare outputs."""
    from rtransform.verify import verify_command
    sys.exit(verify_command(file, spec, device=device, json_out=as_json))


@main.command("convert-all")
@click.argument("src_dir", type=click.Path(file_okay=False))
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option("--jobs", type=int, default=None, help="worker processes (default: one per core)")
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@click.option("--verify", "do_verify", is_flag=True, help="verify kernels that have a NAME.spec.yaml")
@click.option("--resources", is_flag=True, help="registers/shared memory per rKernel from ptxas (needs nvcc)")
@click.option("--strict", is_flag=True, help="exit non-zero when any kernel is refused")
def convert_all(src_dir: str, out_dir: str, jobs: int | None, as_json: bool, do_verify: bool, resources: bool,
                strict: bool) -> None:
    """Convert every kernel of a directory of .cu/.cuh files, in parallel, with a report."""
    from rtransform.batch import convert_all_command
    sys.exit(convert_all_command(src_dir, out_dir, jobs=jobs, json_out=as_json, verify=do_verify,
                                 resources=resources, strict=strict))


# ---- rammer: models ---------------------------------------------------------------------------------------
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def rammer_main() -> None:
    """rammer: compile an ONNX model into persistent rPrograms, run, check and benchmark it."""


@rammer_main.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option("--corpus", type=click.Path(file_okay=False), default=None, help="kernel corpus (default: built-in)")
@click.option("--policy", type=click.Choice(["wavefront", "ios", "sequential"]), default="wavefront", show_default=True)
@click.option("--target", type=click.Choice(["gpu", "cpu"]), default="gpu", show_default=True)
@click.option("--veus", type=int, default=None, help="number of vEUs (default: what fits the target)")
@click.option("--profile", type=click.Choice(["auto", "model", "measured"]), default="auto", show_default=True,
              help="rTask times: measured on the device (cached per device), the cost model, or measured when a "
                   "GPU build has a GPU")
def build(model: str, out_dir: str, corpus: str | None, policy: str, target: str, veus: int | None,
          profile: str) -> None:
    """Build MODEL.onnx into OUT_DIR (program, plan.json, weights, timeline, report)."""
    from scheduler.build import build_command
    sys.exit(build_command(model, out_dir, corpus=corpus, policy=policy, target=target, veus=veus, profile=profile))


@rammer_main.command("run")
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--inputs", type=click.Path(dir_okay=False), default=None, help="inputs (.npz); default random")
@click.option("--check", is_flag=True, help="compare every output with onnxruntime")
@click.option("--save", type=click.Path(dir_okay=False), default=None, help="save outputs (.npz)")
@click.option("--device", type=click.Choice(["gpu", "cpu"]), default=None,
              help="where to run (default: the build's --target)")
@click.option("--seed", type=int, default=0, show_default=True, help="seed of the random inputs")
def rammer_run(out_dir: str, inputs: str | None, check: bool, save: str | None, device: str | None,
               seed: int) -> None:
    """Run a built model once (random inputs unless --inputs), optionally checked against onnxruntime."""
    from scheduler.build import run_command
    sys.exit(run_command(out_dir, inputs=inputs, check=check, save=save, device=device, seed=seed))


@rammer_main.command()
@click.argument("name", required=False)
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None)
@click.option("--batch", type=int, default=1, show_default=True)
@click.option("--small", is_flag=True, help="a reduced size that runs on the CPU emulator")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--list", "list_", is_flag=True, help="list the models")
def zoo(name: str | None, output: str | None, batch: int, small: bool, seed: int, list_: bool) -> None:
    """Write one of the benchmark models as ONNX."""
    from scheduler.zoo import zoo_command
    sys.exit(zoo_command(name, output, batch, small, seed, list_))


@rammer_main.command()
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("--batch", type=int, default=1, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.option("--repeats", type=int, default=100, show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="keep the rammer builds here (timeline.svg, report.md per policy); default: a temporary folder")
def bench(model: str, batch: int, as_json: bool, repeats: int, out_dir: str | None) -> None:
    """Benchmark a model on the GPU: rammer vs op-by-op, CUDA Graph, PyTorch, torch.compile."""
    from rtransform.bench import bench_command
    sys.exit(bench_command(model, batch, as_json, repeats=repeats, out_dir=out_dir))


if __name__ == "__main__":
    main()
