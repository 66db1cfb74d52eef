"""`rtransform run`: launch one kernel of a CUDA file as its launch spec says, on the CPU emulator or a GPU.

Public API:
    run_command(file, spec, converted=False, device="cpu", save=None) -> int
        Prints one line per output (and per problem); exit code 0 ok, 1 error, 2 bad input, 3 no GPU.
    run_file(file, spec_path, converted=False, device="cpu") -> RunResult
        inputs: argument values before the launch; outputs: every argument after it (scalars unchanged).
    prepare(file, spec_path, extra_include_dirs=()) -> Prepared   # read, slice, check the spec (shared with verify)
    make_module(device, source, kernels, include_dirs)            # CpuModule or GpuModule
    launch(module, expr, grid, block, dyn_smem, values) -> dict    # copies in, runs, returns the values after
    RunError: one-line message + exit code.

With --converted, FILE is a converted source (`rtransform convert` output): its __global__ wrapper has the legacy
name and signature, so the same spec launches it unchanged.
"""
from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from converter.flags import CompileFlags
from converter.slice import SliceError, header_copies, materialize_headers, slice_source
from toolchain.cache import cache_dir, content_key
from vdevice import RUNTIME_INCLUDE
from toolchain.files import InputError, Inputs, OutputError, read_input, source_text, write_atomic
from toolchain.exits import Exit
from toolchain.messages import whole_message
from rtransform.spec import LaunchSpec, SpecError, check_params, load_spec, make_inputs

EXIT_ERROR, EXIT_USAGE, EXIT_NO_GPU = Exit.FAILED, Exit.USAGE, Exit.MISSING  # toolchain.exits: one table
MAX_SOURCE_BYTES = 64 * 2**20  # a CUDA source (generated ones included) is far smaller; anything bigger is not one


# The sliced copy of each local header this process built from -> the header itself: every message names the header
# the user wrote (a syntax error, a sanitizer report's line), never the copy in the cache.
_HEADER_COPIES: dict[str, str] = {}


def original_paths(text: str) -> str:
    """A message with the sliced copies of local headers replaced by the headers they were cut from."""
    for copy, header in _HEADER_COPIES.items():
        text = text.replace(copy, header)
    return text


class RunError(Exception):
    """A run that cannot happen; str() is the one line to print, .code the exit status."""

    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(original_paths(message))
        self.code = code


@dataclass
class Prepared:
    """A kernel file ready to build: the device-only text, its include path and the checked spec."""
    file: str
    spec: LaunchSpec
    text: str                      # device code only (host code blanked, lines kept)
    include_dirs: list[str]
    dropped_includes: list[str] = field(default_factory=list)
    flags: CompileFlags = field(default_factory=CompileFlags)

    def build_source(self, text: str) -> str:
        """Text to build: the -include files ahead of it (lines kept)."""
        return self.flags.forced_prefix(self.file) + text


@dataclass
class RunResult:
    """Argument values before and after one launch."""
    spec: LaunchSpec
    inputs: dict[str, Any]
    outputs: dict[str, Any]


def read_source(file: str) -> str:
    """The text of a CUDA source file, or RunError saying why it cannot be read."""
    try:
        return source_text(read_input(file, "source", MAX_SOURCE_BYTES))
    except InputError as e:
        raise RunError(str(e), EXIT_USAGE) from None


def prepare(file: str, spec_path: str, extra_include_dirs: Sequence[str] = (),
            flags: CompileFlags | None = None) -> Prepared:
    """Read FILE and the spec, slice out the device code (local headers too), and check the spec against the
    kernel's parameters. The source's folder is searched for "..." includes only (-iquote, as nvcc does), so a
    local header named like a system one never shadows it."""
    spec = _load(spec_path)
    text = read_source(file)
    flags = flags or CompileFlags()
    include_dirs = [str(d) for d in extra_include_dirs]
    try:
        sliced = slice_source(text, file, [spec.kernel], include_dirs, flags)
        check_params(spec, sliced.params[sliced.kernels[0]])
    except SliceError as e:
        raise RunError(e.diagnostics[0], EXIT_USAGE) from None
    except SpecError as e:
        raise RunError(str(e), EXIT_USAGE) from None
    except (IndexError, KeyError, ValueError, AssertionError, AttributeError) as e:  # the slicer's own defect
        raise RunError(f"{file}:1:1: error: the device-code slicer cannot read this file ({type(e).__name__}: "
                       f"{e}); `rtransform convert` may still convert it: please report the file") from None
    body = sliced.text
    if sliced.headers:
        parts = (f"{h}\0{t}" for h, t in sorted(sliced.headers.items()))
        folder = cache_dir("sliced") / content_key(os.path.abspath(file), *parts)
        _HEADER_COPIES.update({str(c): h for h, c in header_copies(sliced, folder).items()})
        body = materialize_headers(sliced, folder)
    return Prepared(file, spec, body, [*flags.include_dirs, *include_dirs], sliced.dropped_includes, flags)


def _load(spec_path: str) -> LaunchSpec:
    try:
        return load_spec(spec_path)
    except SpecError as e:
        raise RunError(str(e), EXIT_USAGE) from None


_MODULES: dict[tuple, Any] = {}
_MAX_MODULES = 64


def make_module(device: str, source: str, kernels: Sequence[str], include_dirs: Sequence[str],
                sanitize: Sequence[str] = (), name: str = "kernel.cu", defines: Sequence[str] = (),
                fresh_globals: bool = False) -> Any:
    """Build `source` for the device ('cpu' emulator or 'gpu'), once per process for the same inputs; on the
    CPU `sanitize` names the emulator's sanitizers (memcheck, racecheck, synccheck) to build in and run, and
    `fresh_globals` starts every launch from the source's initial globals (CpuModule)."""
    sanitize = tuple(sanitize) if device == "cpu" else ()
    key = (device, source, tuple(kernels), tuple(include_dirs), sanitize, name, tuple(defines), fresh_globals)
    if key not in _MODULES:
        if len(_MODULES) >= _MAX_MODULES:
            _MODULES.pop(next(iter(_MODULES)))
        _MODULES[key] = _build_module(device, source, kernels, include_dirs, sanitize, name, defines, fresh_globals)
    return _MODULES[key]


def _build_module(device: str, source: str, kernels: Sequence[str], include_dirs: Sequence[str],
                  sanitize: Sequence[str] = (), name: str = "kernel.cu", defines: Sequence[str] = (),
                  fresh_globals: bool = False) -> Any:
    try:
        if device == "gpu":
            from vdevice.gpu import GpuModule, NoGpuError
            try:
                return GpuModule(source, list(kernels), list(include_dirs))
            except NoGpuError as e:
                raise RunError(str(e), EXIT_NO_GPU) from None
        if device != "cpu":
            raise RunError(f"error: unknown device '{device}' (cpu or gpu)")
        from cuda_emu import CpuModule
        return CpuModule(source, list(kernels), list(include_dirs), CompileFlags(defines=tuple(defines)).defines_map(),
                         sanitize=sanitize, name=name, fresh_globals=fresh_globals)
    except RunError:
        raise
    except Exception as e:  # compiler failures come back as exceptions with the compiler's text
        raise RunError(f"error: building for {device} failed: {first_error_line(e)}") from None


def first_error_line(e: BaseException) -> str:
    """The most telling line of an exception's text (the first compiler 'error:' line when there is one)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln]
    return (errors or lines or [type(e).__name__])[0]


def launch(module: Any, expr: str, grid: Sequence[int], block: Sequence[int], dyn_smem: int,
           values: dict[str, Any], extra: Sequence[Any] = (), order: Any = None,
           yield_budget: int | None = None) -> dict[str, Any]:
    """Launch with copies of `values` (in order) plus `extra` args; returns the copies after the launch. On the CPU,
    `order` runs the blocks in that order (CpuModule.launch) and `yield_budget` replaces the emulator's default."""
    args = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in values.items()}
    named = {"names": [*args, *(f"extra{i}" for i in range(len(extra)))]} if getattr(module, "sanitize", ()) else {}
    if order is not None:
        named["order"] = order
    if yield_budget is not None:
        named["yield_budget"] = yield_budget
    try:
        module.launch(expr, tuple(grid), tuple(block), dyn_smem, [*args.values(), *extra], **named)
    except Exception as e:  # emulator deadlock/fault, a sanitizer report or a CUDA error: the run failed
        raise RunError(f"error: launch of {expr} failed: {whole_message(e)}") from None
    return args


def run_file(file: str, spec_path: str, converted: bool = False, device: str = "cpu",
             sanitize: Sequence[str] = ("memcheck",), flags: CompileFlags | None = None) -> RunResult:
    """Run the legacy kernel (or the converted wrapper) once as the spec says (on the CPU under `sanitize`)."""
    prep = prepare(file, spec_path, [str(RUNTIME_INCLUDE)] if converted else [], flags)
    spec = prep.spec
    module = make_module(device, prep.build_source(prep.text), [spec.kernel_expr()], prep.include_dirs, sanitize,
                         prep.file, prep.flags.defines)
    inputs = make_inputs(spec)
    outputs = launch(module, spec.kernel_expr(), spec.grid, spec.block, spec.dynamic_smem, inputs)
    return RunResult(spec, inputs, outputs)


def save_npz(path: str, result: RunResult) -> None:
    """Every argument as `in.NAME` (before) and `out.NAME` (after)."""
    arrays = {f"in.{k}": np.asarray(v) for k, v in result.inputs.items()}
    arrays.update({f"out.{k}": np.asarray(v) for k, v in result.outputs.items()})
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    write_atomic(path, buf.getvalue())


def describe(name: str, a: np.ndarray) -> str:
    """One line about an output array: dtype, size and a few statistics."""
    head = f"{name}: {a.dtype}[{a.size}]"
    if a.size == 0:
        return head
    f = a.astype(np.float64)
    return f"{head} min={f.min():.6g} max={f.max():.6g} sum={f.sum():.6g} first={f[:4].tolist()}"


def run_command(file: str, spec: str, converted: bool = False, device: str = "cpu", save: str | None = None,
                sanitize: Sequence[str] = ("memcheck",), flags: CompileFlags | None = None,
                inputs: Inputs | None = None) -> int:
    """CLI body of `rtransform run`; returns the exit status. `inputs`: the run's inputs as the CLI knows them
    (with the compile database); --save is refused over, into or above any of them before the run."""
    flags = flags or CompileFlags()
    try:
        target = None
        if save:
            guard = inputs or Inputs().source(file, flags.include_dirs, flags.includes)
            target = guard.file(spec, "the launch spec").check_file(save, "--save")
        result = run_file(file, spec, converted=converted, device=device, sanitize=sanitize, flags=flags)
        if target is not None:
            save_npz(str(target), result)
    except (InputError, OutputError) as e:
        print(str(e), file=sys.stderr)
        return EXIT_USAGE
    except RunError as e:
        print(str(e), file=sys.stderr)
        return e.code
    except OSError as e:
        print(f"{e.filename or save}: error: {e.strerror or e}", file=sys.stderr)
        return EXIT_ERROR
    s = result.spec
    kind = "converted" if converted else "legacy"
    print(f"ran {kind} {s.kernel_expr()} of {file} on {device}: grid {list(s.grid)} block {list(s.block)}")
    for name in s.outputs:
        print("  " + describe(name, result.outputs[name]))
    if save:
        print(f"saved in.* / out.* of {len(result.outputs)} argument(s) to {save}")
    return 0
