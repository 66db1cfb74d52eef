"""`rtransform`: the kernel tools (convert, run, verify, convert-all, spec, include-dir, index)."""
from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from cuda_emu.options import emulator_limits, sanitize_option
from toolchain import package_version
from toolchain.exits import Exit

# Start-up stays light (`rtransform --version`, `--help`): libclang, numpy and the emulator load inside commands.
DEVICE_HELP = "where the kernel runs: cpu (the CUDA emulator, with sanitizers) or gpu (NVRTC; needs a GPU)"


def _fail(lines: list[str], code: int = Exit.FAILED) -> NoReturn:
    for line in lines:
        click.echo(line, err=True)
    sys.exit(code)


def _need_file(path: str, what: str = "") -> None:
    """A missing input is one line, `FILE: error: no such file`, and exit 2 (no position: there is no line); a FIFO
    or device is refused before it is opened (a read would block, or never end)."""
    from toolchain.files import regular_file_error
    if not os.path.lexists(path):
        _fail([f"{path}: error: no such file{what}"], Exit.USAGE)
    why = regular_file_error(path, what.strip(" ()") or "input")
    if why:
        _fail([why], Exit.USAGE)


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
        _fail([str(e)], Exit.USAGE)
    for m in more:
        guard.file(m)
    return guard


def _refuse_clash(guard: Any, path: str | Path, option: str) -> None:
    """Exit with the guard's one line when `path` is over, into or above an input of the run."""
    from toolchain.files import OutputError
    try:
        guard.refuse_clash(path, option)
    except OutputError as e:
        _fail([str(e)], Exit.USAGE)


def _checked_output(guard: Any, path: str | Path, option: str, **mine: Any) -> Path:
    """Where to write `path` (its real path), or exit with the guard's one-line refusal; `mine`: the guard's
    ours/force/tool (an existing file the command did not write is refused without --force)."""
    from toolchain.files import OutputError
    try:
        return guard.check_file(path, option, **mine)
    except OutputError as e:
        _fail([str(e)], Exit.USAGE)


FORCE_HELP = "replace an existing -o file that this command did not write (refused otherwise)"


def _own_spec(path: Path) -> bool:
    """Whether a file is a spec `rtransform spec` wrote (its first line: `# launch spec ...`)."""
    from toolchain.files import first_bytes
    return first_bytes(path, 64).startswith(b"# launch spec")


def _file_flags(file: str, include_dirs, defines, forced_includes, std, build_dir):
    """The flags for one file (its compile database entry first), or exit with the one-line reason."""
    from converter.flags import FlagsError, resolve
    try:
        return resolve(file, _flags(include_dirs, defines, forced_includes, std), build_dir)
    except FlagsError as e:
        _fail([str(e)], Exit.USAGE)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_version(), prog_name="rtransform")
def main() -> None:
    """rtransform: turn legacy CUDA kernels into rKernels and check them.

    `run` and `verify` compile the kernel file and execute it natively (g++ for the CPU emulator, NVRTC on a
    GPU): run them only on code you trust.

    Exit status: 0 ok, 1 failed (a refused kernel, outputs that differ, a run error), 2 bad command line or input
    (a missing file, a malformed spec, an unknown kernel), 3 this machine lacks what the command needs (a GPU)."""


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(),
              help="converted source: a file, a folder (DIR/ keeps FILE's name, as convert-all does) or '-' for "
                   "stdout [default: FILE with the .rtask tag beside it: x.cu -> x.rtask.cu]")
@click.option("--kernel", "kernels", multiple=True, help="convert only this kernel (repeatable)")
@click.option("--json", "as_json", is_flag=True, help="print the rKernel metadata as JSON on stdout")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@compile_options
def convert(file: str, output: str | None, kernels: tuple[str, ...], as_json: bool, force: bool, include_dirs,
            defines, forced_includes, std, build_dir) -> None:
    """Convert the __global__ kernels of FILE into rKernels (+ plain wrappers and metadata)."""
    from converter import ConversionError, convert_file, metadata_json, write_atomic
    from rtransform.naming import converted_path, foreign_file, metadata_for
    if output == "-" and as_json:
        _fail(["error: -o - and --json both write to stdout; write the source to a file or leave out --json"],
              Exit.USAGE)
    _need_file(file)
    out = None if output == "-" else converted_path(Path(file), output)
    if output is None and out is not None and foreign_file(out):  # the default place: never a file of the user's
        _fail([f"{out}: error: exists and was not written by rtransform convert; move it away or choose -o"],
              Exit.USAGE)
    flags = _file_flags(file, include_dirs, defines, forced_includes, std, build_dir)
    guard = _guard(file, flags, build_dir)
    for t in ([out, metadata_for(out)] if out else []):
        _refuse_clash(guard, t, "-o")  # before the work; the whole check (folders too) before the write
    try:
        res = convert_file(file, list(kernels) or None, strict=True, flags=flags)
    except ConversionError as e:
        unknown = all("error: no __global__ kernel named" in d for d in e.diagnostics)
        _fail(e.diagnostics + _partial_hint(file, list(kernels), e, flags), Exit.USAGE if unknown else Exit.FAILED)
    for w in res.warnings:
        click.echo(w, err=True)
    meta = metadata_json(file, res.rkernels, res.refused)
    if out is None:
        click.echo(res.output, nl=False)
    else:
        for opened in res.inputs:  # every file the parse opened, macro-named includes too
            guard.file(opened)
        targets = [_checked_output(guard, t, "-o") for t in (out, metadata_for(out))]
        if output is not None and not force and targets[0].is_file() and foreign_file(targets[0]):
            _fail([f"{out}: error: -o: the file exists and was not written by rtransform convert; refusing to "
                   f"replace it (choose another path, or --force to replace it)"], Exit.USAGE)
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
@click.option("--force", is_flag=True, help=FORCE_HELP)
@click.option("--from-host", is_flag=True, help="read the launch, the cudaMalloc sizes and their constants from the "
              "host code (this file and --host files); the skeleton guess when no launch is found")
@click.option("--host", "host_files", multiple=True, type=click.Path(dir_okay=False),
              help="another file whose host code launches KERNEL (repeatable; with --from-host)")
@click.option("--set", "settings", multiple=True, metavar="NAME=VALUE",
              help="give a name of the host code its value (the problem size: --set N=4096; with --from-host)")
@compile_options
def spec(file: str, kernel: str, output: str | None, force: bool, from_host: bool, host_files: tuple[str, ...],
         settings: tuple[str, ...], include_dirs, defines, forced_includes, std, build_dir) -> None:
    """Write a launch spec for KERNEL of FILE: with --from-host the host code's launch and sizes (at a small
    problem size, each value it could not derive named in a comment); otherwise a skeleton of its parameters with
    the launch sizes the host code spells with constants (`dim3 block(16, 16)` included); the values it
    had to guess are listed in a comment at the top and on stderr. Check the guesses before verifying."""
    from converter import write_atomic
    from converter.slice import SliceError
    from rtransform.run import RunError, read_source
    from rtransform.skeleton import build_skeleton
    _need_file(file)
    flags = _file_flags(file, include_dirs, defines, forced_includes, std, build_dir)
    target = _checked_output(_guard(file, flags, build_dir), output, "-o", ours=_own_spec, force=force,
                             tool="rtransform spec") if output else None
    try:
        text = None
        if from_host:
            from rtransform.host_spec import HostSpecError, spec_from_host
            overrides = {}
            for s in settings:
                name, _, value = s.partition("=")
                if not re.fullmatch(r"[A-Za-z_]\w*(\.[xyz])?", name) or not value.strip().lstrip("-").isdigit():
                    _fail([f"error: --set {s}: expected NAME=INTEGER"], Exit.USAGE)
                overrides[name] = int(value)
            try:
                text = spec_from_host(read_source(file), file, kernel, flags,
                                      {h: read_source(h) for h in host_files}, overrides).yaml
            except HostSpecError as e:
                click.echo(f"{file}: note: {e}; the skeleton guess instead", err=True)
        if text is None:
            skeleton = build_skeleton(read_source(file), file, kernel, flags)
            for guess in skeleton.guesses:
                click.echo(f"{file}: note: {kernel}: guessed {guess}", err=True)
            text = skeleton.text
    except SliceError as e:
        _fail(e.diagnostics[:1], Exit.USAGE)
    except RunError as e:
        _fail([str(e)], e.code)
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
    from vdevice import RUNTIME_INCLUDE
    click.echo(str(RUNTIME_INCLUDE))


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--spec", required=True, type=click.Path(dir_okay=False), help="launch spec (YAML)")
@click.option("--converted", is_flag=True, help="run the converted rKernel through its plain wrapper")
@click.option("--device", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True, help=DEVICE_HELP)
@click.option("--save", type=click.Path(dir_okay=False), help="save in.NAME / out.NAME arrays (.npz)")
@sanitize_option("memcheck")
@emulator_limits
@compile_options
def run(file: str, spec: str, converted: bool, device: str, save: str | None, sanitize: tuple[str, ...],
        include_dirs, defines, forced_includes, std, build_dir) -> None:
    """Run one kernel of FILE as the spec says (legacy, or converted with --converted).

    FILE is compiled and executed natively (g++ for the CPU emulator, NVRTC on a GPU): run only code you trust."""
    from rtransform.run import run_command
    _need_file(file)
    _need_file(spec, " (the launch spec)")
    flags = _file_flags(file, include_dirs, defines, forced_includes, std, build_dir)
    guard = _guard(file, flags, build_dir, spec) if save else None
    sys.exit(run_command(file, spec, converted=converted, device=device, save=save, sanitize=sanitize, flags=flags,
                         inputs=guard))


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--spec", required=True, type=click.Path(dir_okay=False), help="launch spec (YAML)")
@click.option("--device", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True, help=DEVICE_HELP)
@click.option("--json", "as_json", is_flag=True, help="machine-readable result")
@sanitize_option("all")
@emulator_limits
@compile_options
def verify(file: str, spec: str, device: str, as_json: bool, sanitize: tuple[str, ...], include_dirs, defines,
           forced_includes, std, build_dir) -> None:
    """Convert, run legacy and rKernel (persistent, shuffled, surplus threads) and compare outputs.

    Both run under the emulator's sanitizers on the CPU. FILE is compiled and executed natively."""
    from rtransform.verify import verify_command
    _need_file(file)
    _need_file(spec, " (the launch spec)")
    flags = _file_flags(file, include_dirs, defines, forced_includes, std, build_dir)
    sys.exit(verify_command(file, spec, device=device, json_out=as_json, sanitize=sanitize, flags=flags))


@main.command("convert-all")
@click.argument("src_dir", type=click.Path(file_okay=False))
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False),
              help="output folder: the tree of SRC_DIR with each converted file under its own name (includes keep "
                   "resolving), its .rkernels.json beside it, report.json")
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
