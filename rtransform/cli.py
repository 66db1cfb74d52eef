"""`rtransform`: the kernel tools (convert, run, verify, convert-all, include-dir)."""
from __future__ import annotations

import re

import sys
from typing import Any
from pathlib import Path

import click

from converter.output import metadata_path
from cuda_emu.options import emulator_limits, sanitize_option
from toolchain import package_version
from vdevice import RUNTIME_INCLUDE


def _fail(lines: list[str], code: int = 1) -> None:
    for line in lines:
        click.echo(line, err=True)
    sys.exit(code)


def compile_options(f):
    """-I, -D, -include, --std and -p BUILD_DIR: the flags the kernel file is compiled with (nvcc's spellings)."""
    opts = [
        click.option("-I", "include_dirs", multiple=True, type=click.Path(file_okay=False),
                     help="add a folder to the include path (repeatable)"),
        click.option("-D", "defines", multiple=True, metavar="NAME[=VALUE]", help="define a macro (repeatable)"),
        click.option("-include", "--include", "forced_includes", multiple=True, type=click.Path(dir_okay=False),
                     help="include FILE ahead of the source (repeatable)"),
        click.option("--std", "std", default=None, metavar="c++NN",
                     help="C++ standard of the parse (default c++17, nvcc's; the CPU emulator builds C++20)"),
        click.option("-p", "build_dir", type=click.Path(), default=None,
                     help="build folder holding compile_commands.json: each file's own -I/-D/-include/-std"),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _flags(include_dirs, defines, forced_includes, std):
    from converter.flags import CompileFlags
    return CompileFlags(tuple(include_dirs), tuple(defines), tuple(forced_includes), std)


def _guard(file: str, flags: Any, build_dir: str | None, *more: str | None) -> Any:
    """The run's inputs (the source, every header it includes, the -include files, the compile database and the
    files in `more`), or exit with the one-line reason (an #include naming a FIFO or device, say)."""
    from toolchain.files import InputError, Inputs
    try:
        guard = Inputs().source(file, flags.include_dirs, flags.includes, build_dir)
    except InputError as e:
        _fail([str(e)])
    for m in more:
        guard.file(m)
    return guard


def _checked_output(guard: Any, path: str | Path, option: str) -> Path:
    """Where to write `path` (its real path), or exit with the guard's one-line refusal."""
    from toolchain.files import OutputError
    try:
        return guard.check_file(path, option)
    except OutputError as e:
        _fail([str(e)], 2)
    raise AssertionError("unreachable")


def _file_flags(file: str, include_dirs, defines, forced_includes, std, build_dir):
    """The flags for one file (its compile database entry first), or exit with the one-line reason."""
    from converter.flags import FlagsError, resolve
    try:
        return resolve(file, _flags(include_dirs, defines, forced_includes, std), build_dir)
    except FlagsError as e:
        _fail([str(e)])


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_version(), prog_name="rtransform")
def main() -> None:
    """rtransform: turn legacy CUDA kernels into rKernels and check them.

    `run` and `verify` compile the kernel file and execute it natively (g++ for the CPU emulator, NVRTC on a
    GPU): run them only on code you trust."""


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="converted source (default: FILE with suffix .rtask.cu; '-' for stdout)")
@click.option("--kernel", "kernels", multiple=True, help="convert only this kernel (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="print the rKernel metadata as JSON on stdout")
@compile_options
def convert(file: str, output: str | None, kernels: tuple[str, ...], as_json: bool, include_dirs, defines,
            forced_includes, std, build_dir) -> None:
    """Convert the __global__ kernels of FILE into rKernels (+ plain wrappers and metadata)."""
    from converter import ConversionError, convert_file, metadata_json, write_atomic
    if output == "-" and as_json:
        _fail(["error: -o - and --json both write to stdout; write the source to a file or leave out --json"], 2)
    out = None if output == "-" else Path(output) if output else Path(file).with_suffix(".rtask.cu")
    _input_file(file)
    flags = _file_flags(file, include_dirs, defines, forced_includes, std, build_dir)
    guard = _guard(file, flags, build_dir)
    for t in ([out, metadata_path(out)] if out else []):
        _checked_output(guard, t, "-o")  # refused before the work, checked again before the write
    try:
        res = convert_file(file, list(kernels) or None, strict=True, flags=flags)
    except ConversionError as e:
        _fail(e.diagnostics + _partial_hint(file, list(kernels), e, flags))
    for w in res.warnings:
        click.echo(w, err=True)
    meta = metadata_json(file, res.rkernels, res.refused)
    if out is None:
        click.echo(res.output, nl=False)
    else:
        for opened in res.inputs:  # every file the parse opened, macro-named includes too
            guard.file(opened)
        targets = [_checked_output(guard, t, "-o") for t in (out, metadata_path(out))]
        try:
            write_atomic(targets[1], meta)
            write_atomic(targets[0], res.output)
        except OSError as e:
            _fail([f"{out}: error: cannot write the converted source: {e.strerror or e}"])
        if not as_json:
            names = ", ".join(m.name for m in res.rkernels)
            click.echo(f"{file}: {len(res.rkernels)} rKernel(s) ({names}) -> {out}", err=True)
    if as_json:
        click.echo(meta, nl=False)


def _input_file(file: str) -> None:
    """Exit with one line unless FILE is a regular file (a FIFO or device would block the read, or never end)."""
    from toolchain.files import regular_file_error
    why = regular_file_error(file, "source")
    if why:
        _fail([why])


def _partial_hint(file: str, kernels: list[str], err: Exception, flags: Any = None) -> list[str]:
    """When only some kernels of a file are refused: a note naming the ones --kernel can still convert."""
    from converter import ConversionError, convert_file
    if not getattr(err, "refused", None):
        return []
    try:
        good = [m.name for m in convert_file(file, kernels or None, strict=False, flags=flags).rkernels]
    except ConversionError:
        return []
    if not good:
        return []
    flags = " ".join(f"--kernel {k}" for k in good)
    return [f"{file}: note: {len(good)} other kernel(s) of this file convert; to convert them alone: {flags}"]


@main.command("spec")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--kernel", required=True, help="the __global__ function (qualified name or plain name)")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="write the skeleton here (default: stdout)")
@click.option("--from-host", is_flag=True, help="read the launch, the cudaMalloc sizes and their constants from the "
              "host code (this file and --host files); the skeleton guess when no launch is found")
@click.option("--host", "host_files", multiple=True, type=click.Path(dir_okay=False),
              help="another file whose host code launches KERNEL (repeatable; with --from-host)")
@click.option("--set", "settings", multiple=True, metavar="NAME=VALUE",
              help="give a name of the host code its value (the problem size: --set N=4096; with --from-host)")
@compile_options
def spec(file: str, kernel: str, output: str | None, from_host: bool, host_files: tuple[str, ...],
         settings: tuple[str, ...], include_dirs, defines, forced_includes, std, build_dir) -> None:
    """Write a launch spec for KERNEL of FILE: with --from-host the host code's launch and sizes (at a small
    problem size, each value it could not derive named in a comment); otherwise a skeleton of its parameters with
    the launch sizes the host code spells with constants. Check the guesses before verifying."""
    from converter import write_atomic
    from converter.slice import SliceError
    from rtransform.run import RunError, read_source
    from rtransform.skeleton import spec_skeleton
    flags = _file_flags(file, include_dirs, defines, forced_includes, std, build_dir)
    _input_file(file)
    target = _checked_output(_guard(file, flags, build_dir), output, "-o") if output else None
    try:
        text = None
        if from_host:
            from rtransform.host_spec import HostSpecError, spec_from_host
            overrides = {}
            for s in settings:
                name, _, value = s.partition("=")
                if not re.fullmatch(r"[A-Za-z_]\w*(\.[xyz])?", name) or not value.strip().lstrip("-").isdigit():
                    _fail([f"error: --set {s}: expected NAME=INTEGER"])
                overrides[name] = int(value)
            try:
                text = spec_from_host(read_source(file), file, kernel, flags,
                                      {h: read_source(h) for h in host_files}, overrides).yaml
            except HostSpecError as e:
                click.echo(f"{file}: note: {e}; the skeleton guess instead", err=True)
        if text is None:
            text = spec_skeleton(read_source(file), file, kernel, flags)
    except SliceError as e:
        _fail(e.diagnostics[:1])
    except RunError as e:
        _fail([str(e)])
    if target is not None:
        try:
            write_atomic(target, text)
        except OSError as e:
            _fail([f"{output}: error: cannot write the spec: {e.strerror or e}"])
        click.echo(f"{file}: spec skeleton for {kernel} -> {output}", err=True)
    else:
        click.echo(text, nl=False)


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
@sanitize_option("memcheck")
@emulator_limits
@compile_options
def run(file: str, spec: str, converted: bool, device: str, save: str | None, sanitize: tuple[str, ...],
        include_dirs, defines, forced_includes, std, build_dir) -> None:
    """Run one kernel of FILE as the spec says (legacy, or converted with --converted).

    FILE is compiled and executed natively (g++ for the CPU emulator, NVRTC on a GPU): run only code you trust."""
    from rtransform.run import run_command
    flags = _file_flags(file, include_dirs, defines, forced_includes, std, build_dir)
    _input_file(file)
    guard = _guard(file, flags, build_dir, spec) if save else None
    sys.exit(run_command(file, spec, converted=converted, device=device, save=save, sanitize=sanitize, flags=flags,
                         inputs=guard))


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--spec", required=True, type=click.Path(dir_okay=False), help="launch spec (YAML)")
@click.option("--device", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="machine-readable result")
@sanitize_option("all")
@emulator_limits
@compile_options
def verify(file: str, spec: str, device: str, as_json: bool, sanitize: tuple[str, ...], include_dirs, defines,
           forced_includes, std, build_dir) -> None:
    """Convert, run legacy and rKernel (persistent, shuffled, surplus threads) and compare outputs.

    Both run under the emulator's sanitizers on the CPU. FILE is compiled and executed natively."""
    from rtransform.verify import verify_command
    flags = _file_flags(file, include_dirs, defines, forced_includes, std, build_dir)
    sys.exit(verify_command(file, spec, device=device, json_out=as_json, sanitize=sanitize, flags=flags))


@main.command("convert-all")
@click.argument("src_dir", type=click.Path(file_okay=False))
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False))
@click.option("--jobs", type=int, default=None, help="worker processes (default: one per core)")
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@click.option("--verify", "do_verify", is_flag=True, help="verify kernels that have a NAME.spec.yaml")
@click.option("--resources", is_flag=True, help="registers/shared memory per rKernel from ptxas (needs nvcc)")
@click.option("--strict", is_flag=True, help="exit non-zero when any kernel is refused")
@compile_options
def convert_all(src_dir: str, out_dir: str, jobs: int | None, as_json: bool, do_verify: bool, resources: bool,
                strict: bool, include_dirs, defines, forced_includes, std, build_dir) -> None:
    """Convert every kernel of a directory of .cu/.cuh files, in parallel, with a report.

    With -p, each file takes its flags from the compile database (files it does not list take the command
    line's flags alone)."""
    from rtransform.batch import convert_all_command
    sys.exit(convert_all_command(src_dir, out_dir, jobs=jobs, json_out=as_json, verify=do_verify,
                                 resources=resources, strict=strict,
                                 flags=_flags(include_dirs, defines, forced_includes, std), build_dir=build_dir))



@main.command("index")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="index file (default: kernel_corpus/index.json)")
@click.option("--no-nvcc", is_flag=True, help="skip ptxas registers even when nvcc is found")
@click.option("--verify", "do_verify", is_flag=True, help="verify every instance on the CPU (slow)")
def index(output: str | None, no_nvcc: bool, do_verify: bool) -> None:
    """Regenerate the corpus index (kernel_corpus/index.json): conversion, rTask counts, ptxas figures."""
    from kernel_corpus.index import INDEX_PATH
    from rtransform.corpus_index import index_command
    sys.exit(index_command(output or INDEX_PATH, no_nvcc=no_nvcc, verify=do_verify))


if __name__ == "__main__":
    main()
