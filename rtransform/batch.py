"""`rtransform convert-all`: convert every kernel of a source tree in parallel, cached, with a report.

Statuses and exit code (the contract the CLI documents):
- per kernel: `converted`; `refused` (a construct that cannot run as an rTask: grid sync, dynamic
  parallelism, texture references, inline asm reading hardware block indices ...; the converter's
  `file:line:col: error: ...` line is the reason); `failed` (its only problems are clang errors).
- per file: `converted` (all its kernels), `partial` (some converted, some refused), `refused` (none
  converted), `no_kernels` (nothing to convert: copied unchanged, so converted files that include it still
  compile), `failed` (a clang error anywhere in the file that no refusal explains, a converter crash, a
  timeout: the one-line reason; no output file is left).
- with --verify, per kernel `verified` / `differs` / `no spec` / `error` (the verification itself broke).
- exit code: 1 when a file or kernel failed, or a verification differs or broke; refused kernels are
  reported but exit 0 unless `strict`, where they exit 1 too. 2 for bad arguments.
"""
from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import multiprocessing as mp
import os
import re
import signal
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from converter import RKernelMeta, metadata_json, metadata_path
from converter.flags import CompileDatabase, CompileFlags, FlagsError, load_database
from converter.output import PtxasFigures
from toolchain.cache import content_key
from toolchain.files import (NAME_MAX, InputError, Inputs, OutputError, include_closure, is_temp_file, own_path,
                             read_input, regular_file_error, remove_own, sha256_file, shown, write_atomic)
from toolchain.outdir import locked
from toolchain.cxx import kernel_expr, template_args_text
from toolchain.demangle import demangle_entry
from toolchain.ptxas import RESOURCE_ARCH, parse_ptxas, run_ptxas
from vdevice import RUNTIME_INCLUDE
from rtransform.naming import metadata_for
from toolchain.nvcc import find_nvcc  # the one nvcc finder; re-exported here for batch users

REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCE_SUFFIXES = (".cu", ".cuh")
CACHE_NAME = ".convert-all-cache.json"
REPORT_NAME = "report.json"
MAX_SOURCE_BYTES = 64 * 2**20  # larger is no CUDA source (a generated one included)
FILE_TIMEOUT_S = 300  # one file: conversion and its nvcc compile
VERIFY_TIMEOUT_S = 300  # added per launch spec beside the file when verifying
REPORT_SCHEMA = 1


# ---- conversion of one file (runs in a worker process) -----------------------------------------------------
@dataclass
class KernelRecord:
    """What happened to one kernel of a file."""
    name: str
    status: str  # converted | refused | failed
    reason: str | None = None
    features: list[str] = field(default_factory=list)
    verify: str | None = None  # verified | differs | no spec | error (only with --verify)
    verify_detail: str | None = None
    resources: list[dict] | None = None  # ptxas figures per instantiation (only with nvcc)


@dataclass
class FileRecord:
    """What happened to one source file."""
    path: str  # relative to the source directory, '/'-separated
    status: str  # converted | partial | refused | no_kernels | failed
    reason: str | None = None
    kernels: list[KernelRecord] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    resources_note: str | None = None

    @staticmethod
    def from_dict(d: dict) -> "FileRecord":
        """Rebuild a record read back from the cache."""
        kernels = [KernelRecord(**k) for k in d.get("kernels", [])]
        return FileRecord(**{**d, "kernels": kernels})


@dataclass
class FileJob:
    """Everything a worker needs to convert one file (picklable)."""
    src_dir: str
    rel: str
    out_dir: str
    verify: bool
    resources: bool
    nvcc: str | None  # set when resources are asked for
    timeout_s: int = FILE_TIMEOUT_S
    flags: CompileFlags = field(default_factory=CompileFlags)  # this file's -I/-D/-include/--std
    # its outputs of the last run (path -> sha256) and the places an interrupted run claimed for it (path -> None)
    owned: dict[str, str | None] = field(default_factory=dict)
    written: dict[str, str] = field(default_factory=dict)  # outputs written by this run (path -> sha256)


TRANSIENT_REASONS = ("timeout:", "converter hung:", "converter process died")


def is_transient(rec: "FileRecord") -> bool:
    """A failure that may not repeat (timeout, hang, dead worker): never cached, retried next run."""
    return rec.status == "failed" and (rec.reason or "").startswith(TRANSIENT_REASONS)


class _FileTimeout(Exception):
    """Raised in a worker by SIGALRM when one file takes too long."""


def one_line(text: str) -> str:
    """First non-empty line of a message, stripped (report reasons are one line each)."""
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()
    return str(text).strip()


def output_paths(rel: str) -> tuple[str, str]:
    """Converted source and metadata paths (relative): `x.cu` -> `x.rkernels.json` as `rtransform convert`
    writes it; a header keeps its suffix (`x.cuh.rkernels.json`) so `x.cu` and `x.cuh` never collide."""
    p = Path(rel)
    return p.as_posix(), metadata_for(p).as_posix()


class _NotOurs(Exception):
    """An output's place holds a file that is not convert-all's (or lies through a symlink): the file fails."""


def _remove_outputs(out_dir: Path, job: FileJob, keep: tuple[str, ...] = ()) -> None:
    """Delete this file's earlier outputs (those the cache says convert-all wrote, still as it wrote them) and
    those written in this run, but never a file of the user's."""
    for r in output_paths(job.rel):
        if r in keep:
            continue
        if r in job.written:
            remove_own(out_dir, r, job.written[r])
        elif r in job.owned:
            remove_own(out_dir, r, job.owned[r])


def _write_output(out_dir: Path, job: FileJob, rel: str, data: str) -> None:
    """Write one output: only at a place inside the output folder that is free or holds convert-all's own file."""
    too_long = [c for c in Path(rel).parts if len(os.fsencode(c)) > NAME_MAX]
    if too_long:
        raise _NotOurs(f"{shown(out_dir / rel)[:120]}...: error: the output's name is {len(os.fsencode(too_long[0]))} "
                       f"bytes, more than the {NAME_MAX} a file system allows; rename the source")
    dest = own_path(out_dir, rel)
    if dest is None:
        raise _NotOurs(f"{shown(out_dir / rel)}: error: the output's place leaves the output folder (a symlinked "
                       f"folder?); not written")
    if os.path.lexists(dest) and rel not in job.owned and rel not in job.written:
        raise _NotOurs(f"{shown(dest)}: error: exists and is not an output of convert-all; move it away")
    if os.path.lexists(dest) and (dest.is_symlink() or not dest.is_file()):
        raise _NotOurs(f"{shown(dest)}: error: is not a regular file; not replaced")
    write_atomic(dest, data)
    job.written[rel] = sha256_file(dest)


def run_job(job: FileJob) -> FileRecord:
    """Convert one file, write its outputs, compile/verify on request; every exception becomes `failed`,
    and a failed file leaves no output behind."""
    out_dir = Path(job.out_dir)
    old = signal.signal(signal.SIGALRM, _raise_timeout) if job.timeout_s else None
    signal.alarm(job.timeout_s)
    try:
        rec = _run_job(job, out_dir)
    except _FileTimeout:
        rec = FileRecord(job.rel, "failed", f"{TRANSIENT_REASONS[0]} not done within {job.timeout_s} s")
    except _NotOurs as exc:
        rec = FileRecord(job.rel, "failed", str(exc))
    except Exception as exc:  # one broken file never stops the batch
        rec = FileRecord(job.rel, "failed", f"converter crashed: {type(exc).__name__}: {one_line(exc)}")
    finally:
        signal.alarm(0)
        if old is not None:
            signal.signal(signal.SIGALRM, old)
    if rec.status == "failed":
        _remove_outputs(out_dir, job)
    return rec


def _raise_timeout(signum, frame):
    raise _FileTimeout()


def _run_job(job: FileJob, out_dir: Path) -> FileRecord:
    """One file converted, its outputs written and checked as asked (run_job adds the timeout and the crash net)."""
    src = Path(job.src_dir) / job.rel
    if shown(job.rel) != job.rel:
        return FileRecord(job.rel, "failed", f"{shown(src)}: error: the file name is not UTF-8 text (another "
                                             f"locale's encoding?): the parser cannot open it; rename it")
    try:
        text = read_input(src, "source", MAX_SOURCE_BYTES).decode("utf-8", errors="replace")
        include_closure(src, job.flags.include_dirs, job.flags.includes)  # an #include of a FIFO: refused
    except InputError as exc:
        return FileRecord(job.rel, "failed", str(exc))
    outcome = convert_kernels(text, os.path.abspath(src), job.flags)
    rec = FileRecord(job.rel, outcome.file_status(), outcome.error, outcome.kernels)
    out_rel, meta_rel = output_paths(job.rel)
    if rec.status == "failed":
        return rec
    if rec.status == "no_kernels":
        _write_output(out_dir, job, out_rel, text)
        _remove_outputs(out_dir, job, keep=(out_rel,))
        rec.outputs = [out_rel]
        return rec
    if not outcome.rkernels:  # every kernel refused: the refusals are recorded, no (empty) converted source written
        _write_output(out_dir, job, meta_rel, metadata_json(job.rel, [], outcome.refused))
        _remove_outputs(out_dir, job, keep=(meta_rel,))
        rec.outputs = [meta_rel]
        return rec
    if job.resources:
        rec.resources_note = attach_resources(job, outcome)
    if job.verify:
        verify_kernels(job, outcome)
    metadata = metadata_json(job.rel, outcome.rkernels, outcome.refused)
    _write_output(out_dir, job, out_rel, outcome.output)
    _write_output(out_dir, job, meta_rel, metadata)
    rec.outputs = [out_rel, meta_rel]
    return rec


# ---- the converter, per kernel ---------------------------------------------------------------------------
@dataclass
class Outcome:
    """Converter result for one file, split per kernel."""
    kernels: list[KernelRecord] = field(default_factory=list)
    output: str = ""
    rkernels: list[RKernelMeta] = field(default_factory=list)
    refused: list[dict] = field(default_factory=list)  # {name, diagnostics}, as the converter reports them
    error: str | None = None  # file-level failure (a clang error)

    def file_status(self) -> str:
        """Aggregate the kernel statuses into the file's status."""
        if self.error is not None:
            return "failed"
        states = {k.status for k in self.kernels}
        if not states:
            return "no_kernels"
        if "failed" in states:
            return "failed"
        if states == {"converted"}:
            return "converted"
        return "partial" if "converted" in states else "refused"


def convert_kernels(text: str, filename: str, flags: CompileFlags | None = None) -> Outcome:
    """Convert all kernels and sort each problem into refused (a converter refusal) or failed (clang error).

    One parse, the one `rtransform convert` makes, serves the whole file and each kernel converted alone, so the
    two commands agree: the converter folds clang errors inside a kernel (or a function it reaches) into that
    kernel's refusal, and a kernel whose only problems are clang errors is `failed`. A clang error outside every
    kernel's reach (host code calling a helper of a header that was not found, a host API the parse prelude does
    not declare) changes no kernel, so, as with `convert`, it fails nothing; a file with no kernel and clang
    errors is not a source this tool can read, and fails."""
    import converter
    from converter.parse import SourceInputError
    try:
        parsed = converter.parse_cuda(text, filename, flags=flags)
    except SourceInputError as exc:
        return Outcome(error=exc.diagnostics[0])
    clang_errors = [f"{filename}:{d.location.line}:{d.location.column}: error: {d.spelling}"
                    for d in parsed.errors()]
    try:
        res = converter.convert_source(text, filename, flags=flags, parsed=parsed)
    except converter.ConversionError:
        res = None  # not one kernel converted: ask per kernel below
    names = kernel_names(parsed) if res is None or res.refused else []
    if res is None:
        out, refusals = Outcome(), {n: _refusal(text, filename, n, flags, parsed) for n in names}
    else:
        out, refusals = _converted(res), {r["name"]: r["diagnostics"] for r in res.refused}
    for name, diags in refusals.items():
        own = [d for d in diags if d not in clang_errors]
        out.kernels.append(KernelRecord(name, "refused" if own else "failed", one_line((own or diags)[0])))
        out.refused.append({"name": name, "diagnostics": diags})
    problems = [k.reason for k in out.kernels if k.status == "failed"]
    if res is None and not names and clang_errors:  # convert's "not a CUDA/C++ source this tool can read"
        problems.append(clang_errors[0])
    out.error = problems[0] if problems else None
    order = {n: i for i, n in enumerate(names)}
    out.kernels.sort(key=lambda k: order.get(k.name, -1))
    return out


def kernel_names(parsed) -> list[str]:
    """Qualified names of the __global__ functions defined in a parsed file, in source order."""
    from converter.convert import Converter
    conv = Converter(parsed)
    conv.collect()
    return [f.qualname for f in sorted(conv.funcs.values(), key=lambda f: f.start) if f.is_kernel]


def _refusal(text: str, filename: str, kernel: str, flags: CompileFlags | None = None,
             parsed=None) -> list[str]:
    """The converter's diagnostics for one kernel converted alone (from the file's one parse when given)."""
    import converter
    try:
        converter.convert_source(text, filename, kernels=[kernel], flags=flags, parsed=parsed)
    except converter.ConversionError as err:
        return err.diagnostics
    raise RuntimeError(f"kernel '{kernel}' converts alone but not with the rest of its file")


def _converted(res) -> Outcome:
    kernels = [KernelRecord(rk.name, "converted", None, sorted(rk.features))
               for rk in res.rkernels]
    return Outcome(kernels, res.output, list(res.rkernels))


# ---- launch specs next to a kernel -----------------------------------------------------------------------
def find_spec(src: Path, kernel: str):
    """The LaunchSpec for a kernel: `NAME.spec.yaml`, else `STEM.spec.yaml` naming it; None if neither.

    NAME is the kernel's unqualified name; a spec names the kernel plainly or with its namespaces."""
    from rtransform.spec import load_spec
    short = kernel.split("::")[-1]
    for path in (src.with_name(f"{short}.spec.yaml"), src.with_name(f"{src.name.rsplit('.', 1)[0]}.spec.yaml")):
        if path.is_file():
            spec = load_spec(path)
            if spec.kernel in (kernel, short):
                return spec
    return None


def spec_files(src: Path) -> list[Path]:
    """Every launch spec beside a source file (they feed the cache key when specs matter)."""
    return sorted(src.parent.glob("*.spec.yaml"))


def verify_kernels(job: FileJob, outcome: Outcome) -> None:
    """Verify on the CPU each converted kernel that has a launch spec: verified / differs / no spec / error."""
    from rtransform import verify as rverify
    src = Path(job.src_dir) / job.rel
    for k in outcome.kernels:
        if k.status != "converted":
            continue
        try:
            spec = find_spec(src, k.name)
            if spec is None:
                k.verify = "no spec"
                continue
            result = rverify.verify_file(str(src), spec.path, flags=job.flags)
            k.verify = "verified" if result.ok else "differs"
            k.verify_detail = None if result.ok else one_line(result.summary())
        except Exception as exc:  # a broken spec or a verification that cannot run is reported, not fatal
            k.verify, k.verify_detail = "error", f"{type(exc).__name__}: {one_line(exc)}"


# ---- resources: nvcc -Xptxas -v on the converted file ------------------------------------------------------
def attach_resources(job: FileJob, outcome: Outcome) -> str | None:
    """Compile the converted file for sm_90 and store ptxas figures per rKernel; returns a note or None.

    Template kernels are instantiated with the template arguments of their launch spec, if any."""
    src = Path(job.src_dir) / job.rel
    instances: list[tuple[RKernelMeta, list]] = []  # (rkernel metadata, template args)
    lines = [outcome.output, "", "// instantiations from launch specs (rtransform convert-all)"]
    for rk in outcome.rkernels:
        if not rk.template_params:
            instances.append((rk, []))
            continue
        spec = find_spec(src, rk.name)
        if spec is None or not spec.template_args:
            rk.ptxas = PtxasFigures(RESOURCE_ARCH, [], note="template: no spec gives its arguments")
            continue
        expr = kernel_expr(rk.name, spec.template_args)
        lines.append(f"void* __rt_instantiate_{len(instances)}() {{ return (void*)&{expr}; }}")
        instances.append((rk, spec.template_args))
    if not instances:
        return None
    ok, text = run_ptxas("\n".join(lines) + "\n", job.nvcc, [str(RUNTIME_INCLUDE), str(src.parent)])
    if not ok:
        return f"nvcc failed: {text}"
    found = {demangle_entry(sym): {"symbol": sym, **res} for sym, res in parse_ptxas(text).items()}
    for rk, targs in instances:
        res = found.get((rk.name.split("::")[-1], template_args_text(targs)))
        rk.ptxas = PtxasFigures(RESOURCE_ARCH, [{"template_args": targs, **res}] if res else [])
        kernel = next(k for k in outcome.kernels if k.name == rk.name)
        kernel.resources = rk.ptxas.instances
    return None


# ---- the batch: discovery, cache, process pool -------------------------------------------------------------
def discover_sources(src_dir: Path, out_dir: Path, skipped: list[str] | None = None) -> list[str]:
    """Relative '/'-paths of every .cu/.cuh below src_dir (recursively, sorted), leaving out out_dir and files
    the converter wrote (listed in `skipped`: converting a conversion fails, and they are not sources)."""
    out_resolved = out_dir.resolve()
    found = []
    for root, dirs, files in os.walk(src_dir):
        rp = Path(root)
        dirs[:] = sorted(d for d in dirs if (rp / d).resolve() != out_resolved)
        for f in files:
            if not f.endswith(SOURCE_SUFFIXES) or (rp / f).is_dir():
                continue
            rel = (rp / f).relative_to(src_dir).as_posix()
            if is_converter_output(rp / f):
                if skipped is not None:
                    skipped.append(rel)
                continue
            found.append(rel)
    if skipped is not None:
        skipped.sort()
    return sorted(found)


CONVERTED_FIRST_LINE = '#include "rtask_runtime.cuh"'


def is_converter_output(path: Path) -> bool:
    """Whether a file is one `rtransform convert` wrote: it opens with the runtime include the converter puts
    first, and its metadata file lies beside it (or its name ends in .rtask.cu, the default output name)."""
    if regular_file_error(path):
        return False  # a FIFO or device is never opened
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            first = fh.readline(4096).strip()
    except OSError:
        return False
    return first == CONVERTED_FIRST_LINE and (path.name.endswith(".rtask.cu") or metadata_path(path).is_file())


_QUOTED_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)


def local_includes(src: Path, limit: int = 200) -> list[Path]:
    """Files reached through `#include "..."` relative to the including file (recursive, bounded)."""
    seen: list[Path] = []
    todo = [src]
    while todo and len(seen) < limit:
        cur = todo.pop()
        try:
            text = cur.read_text(errors="replace")
        except OSError:
            continue
        for name in _QUOTED_INCLUDE.findall(text):
            inc = (cur.parent / name).resolve()
            if inc.is_file() and inc not in seen and inc != src.resolve():
                seen.append(inc)
                todo.append(inc)
    return seen


def digest_files(paths: list[Path], *extra: str) -> str:
    """sha256 over the contents of files (missing ones count as absent) and extra strings."""
    h = hashlib.sha256()
    for p in paths:
        h.update(os.fsencode(p) + b"\0")
        h.update(p.read_bytes() if p.is_file() else b"<absent>")
        h.update(b"\0")
    for e in extra:
        h.update(e.encode() + b"\0")
    return h.hexdigest()


def _package_files(pkg_dir: Path) -> list[Path]:
    """Sources and headers of a package (what a toolchain digest covers)."""
    return sorted(p for p in pkg_dir.rglob("*") if p.is_file() and p.suffix in (".py", ".h", ".cuh"))


def toolchain_version(verify: bool, resources: bool, nvcc: str | None) -> str:
    """Digest of everything besides the input that decides a file's result (converter, verifier, nvcc)."""
    import converter
    from toolchain.stubs import STUB_ROOT
    files = _package_files(Path(converter.__file__).parent) + [Path(__file__)]
    files += sorted(p for p in STUB_ROOT.rglob("*") if p.is_file())  # the parse's headers (<cstdio> has no suffix)
    extra = [getattr(converter, "CONVERTER_VERSION", ""), f"verify={verify}", f"resources={resources}"]
    if verify:
        files += (_package_files(REPO_ROOT / "vdevice") + _package_files(REPO_ROOT / "cuda_emu")
                  + _package_files(REPO_ROOT / "rtransform"))
    if resources:
        files += [RUNTIME_INCLUDE / "rtask_runtime.cuh"]
        extra.append(f"nvcc={nvcc}:{os.stat(nvcc).st_mtime_ns if nvcc else None}")
    return digest_files(files, *extra)


def cache_key(src: Path, toolchain: str, with_specs: bool) -> str:
    """Key of one file's result: its text, its local includes, the toolchain, and its specs when used."""
    deps = [src] + local_includes(src) + (spec_files(src) if with_specs else [])
    return digest_files(deps, toolchain)


CACHE_MARKER = "rtransform convert-all output"  # the output folder's marker, in its cache file


def _read_cache(out_dir: Path) -> dict | None:
    """The cache file's object when it is convert-all's (marked, or the unmarked format 1), else None."""
    path = out_dir / CACHE_NAME
    try:
        if path.is_symlink() or not path.is_file():
            return None
        data = json.loads(read_input(path, "convert-all cache", 256 * 2**20))
    except (InputError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("entries"), dict):
        return None
    return data if data.get("marker") == CACHE_MARKER or data.get("schema") == 1 else None


def is_output_folder(out_dir: Path) -> bool:
    """Whether a folder is convert-all's output: its cache file carries the marker."""
    return _read_cache(out_dir) is not None


def load_cache(out_dir: Path) -> dict:
    """Previous results by relative path; an unreadable cache is an empty one, and an entry whose outputs are not
    a list of relative paths with digests inside the folder is dropped (the file is edited at the user's will)."""
    data = _read_cache(out_dir)
    if data is None:
        return {}
    good = {}
    for rel, entry in data["entries"].items():
        outs = entry.get("outputs") if isinstance(entry, dict) else None
        if isinstance(outs, dict) and all(isinstance(d, str) and own_path(out_dir, r) for r, d in outs.items()):
            good[rel] = entry
    return good


def load_claims(out_dir: Path) -> dict[str, list[str]]:
    """The output places a run claimed before converting (per source): an interrupted run's files there are its
    own, though no digest of them was recorded."""
    data = _read_cache(out_dir)
    claims = data.get("claims") if data else None
    if not isinstance(claims, dict):
        return {}
    return {rel: [p for p in paths if isinstance(p, str) and own_path(out_dir, p)]
            for rel, paths in claims.items() if isinstance(paths, list)}


def save_cache(out_dir: Path, entries: dict, claims: dict[str, list[str]] | None = None) -> None:
    """Write the cache for the next run (it is also the folder's marker), with the places still claimed."""
    write_atomic(out_dir / CACHE_NAME, json.dumps({"schema": REPORT_SCHEMA, "marker": CACHE_MARKER,
                                                   "entries": entries, "claims": claims or {}}, indent=1))


def claim_outputs(out: Path, todo: list[FileJob]) -> dict[str, list[str]]:
    """Before any worker writes: the places each job may write (free, or already its own), recorded in the cache so
    that a kill after a write still leaves files the next run knows as convert-all's."""
    claims = {}
    for job in todo:
        free = [r for r in output_paths(job.rel)
                if r in job.owned or ((p := own_path(out, r)) is not None and not os.path.lexists(p))]
        claims[job.rel] = free
        job.owned.update({r: job.owned.get(r) for r in free})
    return claims


def output_digests(out_dir: Path, rec: FileRecord) -> dict[str, str]:
    """sha256 of each output file of a record (a cache hit needs them unchanged on disk)."""
    out = {}
    for r in rec.outputs:
        p = own_path(out_dir, r)
        if p is None:
            raise OSError(f"{r}: not inside the output folder")
        out[r] = sha256_file(p)
    return out


def cached_record(entry: dict | None, key: str, out_dir: Path) -> FileRecord | None:
    """The cached result when the key matches and its outputs are still there, unchanged."""
    if not entry or entry.get("key") != key:
        return None
    try:
        rec = FileRecord.from_dict(entry["record"])
        if output_digests(out_dir, rec) != entry.get("outputs"):
            return None
    except (OSError, KeyError, TypeError):
        return None
    return rec


def run_pool(jobs: list[FileJob], workers: int, on_done) -> dict[str, FileRecord]:
    """Convert files in a process pool; a worker that dies is retried alone, so only its file fails."""
    results: dict[str, FileRecord] = {}
    lost = _pool_round(jobs, workers, results, on_done)
    for job in lost:  # the pool broke: find the file that kills its worker
        if _pool_round([job], 1, results, on_done):
            rec = FileRecord(job.rel, "failed", f"{TRANSIENT_REASONS[2]} (a crash in native code?)")
            results[job.rel] = rec
            on_done(rec)
    return results


def _pool_round(jobs: list[FileJob], workers: int, results: dict, on_done) -> list[FileJob]:
    """One pool over the jobs; returns the jobs lost to a broken pool or a stalled worker."""
    if not jobs:
        return []
    stall_s = max(j.timeout_s for j in jobs) + 60
    # fork: workers start at once with the converter already imported (spawn would re-import libclang)
    pool = cf.ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=mp.get_context("fork"))
    futures = {pool.submit(run_job, j): j for j in jobs}
    lost: list[FileJob] = []
    pending = set(futures)
    try:
        while pending:
            done, pending = cf.wait(pending, timeout=stall_s, return_when=cf.FIRST_COMPLETED)
            if not done:  # nothing finished for longer than any file may take: a hang in native code
                for f in sorted(pending, key=lambda f: futures[f].rel):
                    if not f.running():
                        lost.append(futures[f])
                        continue
                    rec = FileRecord(futures[f].rel, "failed", f"{TRANSIENT_REASONS[1]} no result within {stall_s} s")
                    results[rec.path] = rec
                    on_done(rec)
                _kill_workers(pool)
                break
            for f in done:
                try:
                    rec = f.result()
                except cf.process.BrokenProcessPool:
                    lost.append(futures[f])
                    continue
                results[rec.path] = rec
                on_done(rec)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return sorted(lost, key=lambda j: j.rel)


def _kill_workers(pool: cf.ProcessPoolExecutor) -> None:
    for proc in list(getattr(pool, "_processes", {}).values()):
        proc.kill()


# ---- the report --------------------------------------------------------------------------------------------
_DIAG_PREFIX = re.compile(r"^.*?:\d+:\d+: (?:fatal )?error: ")


def reason_key(reason: str) -> str:
    """A reason without its `file:line:col: error:` location, so equal causes count together."""
    return _DIAG_PREFIX.sub("", reason)


def exit_code(records: list[FileRecord], strict: bool) -> int:
    """1 on any failure or bad verification (and on refusals with strict), else 0."""
    for rec in records:
        if rec.status == "failed":
            return 1
        for k in rec.kernels:
            if k.status == "failed" or k.verify in ("differs", "error") or (strict and k.status == "refused"):
                return 1
    return 0


def count_report(records: list[FileRecord]) -> dict:
    """Counts per file status, kernel status, feature, reason, verification result."""
    files = Counter(r.status for r in records)
    kernels = Counter(k.status for r in records for k in r.kernels)
    features = Counter(f for r in records for k in r.kernels if k.status == "converted" for f in k.features)
    reasons = Counter(reason_key(x) for r in records
                      for x in ([r.reason] if r.status == "failed" else [k.reason for k in r.kernels if k.reason]))
    verify = Counter(k.verify for r in records for k in r.kernels if k.verify)
    return {"files": dict(sorted(files.items())), "kernels": dict(sorted(kernels.items())),
            "features": dict(sorted(features.items())), "reasons": dict(sorted(reasons.items())),
            "verify": dict(sorted(verify.items()))}


def build_report(records: list[FileRecord], options: dict, run: dict, code: int) -> dict:
    """The JSON report: per file and kernel, counts, and what this run did (timing, cache hits)."""
    return {"schema": REPORT_SCHEMA, "options": options, "exit_code": code,
            "counts": count_report(records), "files": [asdict(r) for r in records], "run": run}


def _kernel_detail(k: KernelRecord) -> str:
    parts = [k.reason] if k.reason else []
    if k.resources:
        from rtransform.spec import template_arg_text
        parts += [f"{r['registers']} regs, {r['spill_stores']}+{r['spill_loads']} B spill, "
                  f"{r['static_smem_bytes']} B smem"
                  + (f" <{', '.join(map(template_arg_text, r['template_args']))}>" if r['template_args'] else "")
                  for r in k.resources]
    if k.verify:
        parts.append(k.verify + (f" ({k.verify_detail})" if k.verify_detail else ""))
    return "; ".join(parts)


def format_table(report: dict) -> str:
    """The readable report: one row per kernel (or per file without kernels), then the counts."""
    rows = [("FILE", "KERNEL", "STATUS", "DETAIL")]
    for f in report["files"]:
        if f["status"] in ("failed", "no_kernels") or not f["kernels"]:
            names = ", ".join(k["name"] for k in f["kernels"]) or "-"
            rows.append((f["path"], names, f["status"], f["reason"] or ""))
        for k in ([] if f["status"] == "failed" else f["kernels"]):
            rows.append((f["path"], k["name"], k["status"], _kernel_detail(KernelRecord(**k))))
        if f.get("resources_note"):
            rows.append((f["path"], "-", "note", f["resources_note"]))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3] for r in rows]
    counts = report["counts"]
    for name in ("files", "kernels", "features", "reasons", "verify"):
        if counts[name]:
            lines.append(f"{name}: " + ", ".join(f"{k} {v}" for k, v in counts[name].items()))
    run = report["run"]
    if run.get("skipped_converter_outputs"):
        lines.append("skipped (outputs of rtransform convert, not sources): "
                     + ", ".join(run["skipped_converter_outputs"]))
    lines.append(f"time: {run['seconds']:.2f} s, {run['converted_files']} files converted now "
                 f"({run['converted_kernels']} kernels, {run['kernels_per_second']:.1f} kernels/s), "
                 f"{run['cache_hits']} from cache; exit {report['exit_code']}")
    return "\n".join(line.rstrip() for line in lines)


# ---- the command -------------------------------------------------------------------------------------------
class UsageError(ValueError):
    """Bad arguments: one line, exit 2."""


def _check_args(src: Path, out: Path, jobs: int | None, flags: CompileFlags, build_dir: str | None) -> Path:
    """Refuse bad arguments before any work; returns the real output folder. The output may not be at or above
    the source tree, a -include file or the compile database, nor an existing folder that is not convert-all's
    output holding files."""
    if not src.is_dir():
        raise UsageError(f"source directory not found: {shown(src)}")
    if jobs is not None and jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {jobs}")
    guard = Inputs().folder(src, "the source tree")
    for f in flags.includes:
        guard.file(f, "an -include file")
    if build_dir:
        db = Path(build_dir)
        guard.file(db / "compile_commands.json" if db.is_dir() else db, "the compile database")
    try:
        return guard.check_folder(out, "-o", ours=is_output_folder,
                                  tool=f"an output folder of rtransform convert-all (no {CACHE_NAME})")
    except OutputError as err:
        raise UsageError(str(err)) from None


def default_jobs() -> int:
    """One job per core available to this process."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def convert_all(src_dir: str | Path, out_dir: str | Path, jobs: int | None = None, verify: bool = False,
                resources: bool = False, strict: bool = False, progress: bool = False,
                file_timeout_s: int = FILE_TIMEOUT_S, flags: CompileFlags | None = None,
                build_dir: str | None = None) -> dict:
    """Convert a tree (library API): writes outputs, cache and report.json; returns the report. Each file is
    parsed with `flags`, after its own entry of BUILD_DIR's compile_commands.json when `build_dir` is given."""
    src = Path(src_dir)
    flags = flags or CompileFlags()
    out = _check_args(src, Path(out_dir), jobs, flags, build_dir)
    try:
        db = load_database(build_dir) if build_dir else None
    except FlagsError as err:
        raise UsageError(str(err)) from None
    start = time.perf_counter()
    nvcc = find_nvcc() if resources else None
    if resources and nvcc is None:
        raise UsageError("--resources needs nvcc: none found ($CUDA_HOME, /usr/local/cuda, the nvidia-cuda-nvcc "
                         "wheel, PATH)")
    toolchain = toolchain_version(verify, resources, nvcc)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"{shown(out)}: error: cannot create the output folder: {err.strerror or err}") from None
    with locked(out):  # one convert-all at a time writes a folder
        return _convert_locked(src, out, jobs, verify, resources, strict, progress, file_timeout_s, flags, db,
                               nvcc, toolchain, start)


def _convert_locked(src: Path, out: Path, jobs: int | None, verify: bool, resources: bool, strict: bool,
                    progress: bool, file_timeout_s: int, flags: CompileFlags, db: CompileDatabase | None,
                    nvcc: str | None, toolchain: str, start: float) -> dict:
    """convert_all's work, holding the output folder's lock."""
    from tqdm import tqdm
    _remove_temp_files(out)
    skipped: list[str] = []
    rels = discover_sources(src, out, skipped)
    old_cache = load_cache(out)
    old_claims = load_claims(out)
    file_flags = {rel: _flags_for(src / rel, flags, db) for rel in rels}
    records: dict[str, FileRecord] = {}
    keys: dict[str, str] = {}
    todo: list[FileJob] = []
    for rel in rels:
        why = regular_file_error(src / rel, "source")
        if why:  # a FIFO, device or dangling link among the sources: reported, never opened
            records[rel] = FileRecord(rel, "failed", why)
            continue
        keys[rel] = content_key(cache_key(src / rel, toolchain, verify or resources), repr(file_flags[rel]))
        hit = cached_record(old_cache.get(rel), keys[rel], out)
        if hit is not None:
            records[rel] = hit
        else:
            budget = file_timeout_s + (VERIFY_TIMEOUT_S * len(spec_files(src / rel)) if verify else 0)
            owned: dict[str, str | None] = {r: None for r in old_claims.get(rel, [])}
            owned.update(old_cache[rel]["outputs"] if rel in old_cache else {})
            todo.append(FileJob(str(src), rel, str(out), verify, resources, nvcc, budget, file_flags[rel], owned))
    _remove_vanished(out, old_cache, old_claims, set(rels))
    entries = {rel: e for rel, e in old_cache.items() if rel in records and rel in keys}  # still valid hits
    claims = claim_outputs(out, todo)
    save_cache(out, entries, claims)
    last_save = [time.monotonic()]

    def finished(rec: FileRecord, bar) -> None:
        """Each finished file enters the cache at once (saved at most every 2 s, and at the end), so an
        interrupted run keeps what it did."""
        bar.update(1)
        if not is_transient(rec):
            claims.pop(rec.path, None)
            try:
                entries[rec.path] = {"key": keys[rec.path], "record": asdict(rec),
                                     "outputs": output_digests(out, rec)}
            except OSError:
                entries.pop(rec.path, None)  # an output that went meanwhile: converted again next run
        if time.monotonic() - last_save[0] > 2.0:
            save_cache(out, entries, claims)
            last_save[0] = time.monotonic()

    with tqdm(total=len(todo), file=sys.stderr, disable=not progress, unit="file", desc="convert-all") as bar:
        try:
            records.update(run_pool(todo, jobs or default_jobs(), lambda rec: finished(rec, bar)))
        finally:
            save_cache(out, entries, claims)
    ordered = [records[rel] for rel in rels]
    seconds = time.perf_counter() - start
    fresh_kernels = sum(len(records[j.rel].kernels) for j in todo)
    run = {"seconds": round(seconds, 3), "jobs": jobs or default_jobs(), "converted_files": len(todo),
           "converted_kernels": fresh_kernels, "kernels_per_second": round(fresh_kernels / seconds, 1),
           "cache_hits": len(rels) - len(todo), "nvcc": nvcc, "skipped_converter_outputs": skipped}
    options = {"src_dir": str(src), "out_dir": str(out), "verify": verify, "resources": resources,
               "strict": strict}
    report = build_report(ordered, options, run, exit_code(ordered, strict))
    write_atomic(out / REPORT_NAME, json.dumps(report, indent=2) + "\n")
    return report


def _flags_for(path: Path, flags: CompileFlags, db: CompileDatabase | None) -> CompileFlags:
    """A file's flags: its compile database entry (when it has one), then the command line's."""
    if db is None:
        return flags
    try:
        return db.flags_for(str(path)).merged(flags)
    except FlagsError:
        return flags


def _remove_vanished(out: Path, old_cache: dict, old_claims: dict[str, list[str]], present: set[str]) -> None:
    """Delete the outputs of sources that no longer exist, so the output tree keeps mirroring the source: only
    files inside the output folder that still hold the bytes convert-all wrote (the cache's digests), and those at
    places an interrupted run claimed."""
    for rel in sorted(set(old_cache) - present):
        for r, digest in old_cache[rel]["outputs"].items():
            remove_own(out, r, digest)
    for rel in sorted(set(old_claims) - present):
        for r in old_claims[rel]:
            remove_own(out, r)


def _remove_temp_files(out: Path) -> None:
    """Temporary files of a killed run (write_atomic's names) inside the output folder, never through a symlink."""
    for root, dirs, files in os.walk(out):
        for f in files:
            if is_temp_file(f):
                remove_own(out, (Path(root) / f).relative_to(out).as_posix())


def convert_all_command(src_dir: str, out_dir: str, jobs: int | None = None, json_out: bool = False,
                        verify: bool = False, resources: bool = False, strict: bool = False,
                        flags: CompileFlags | None = None, build_dir: str | None = None) -> int:
    """CLI body of `rtransform convert-all`: prints the table (or the JSON report) and returns the exit code."""
    try:
        report = convert_all(src_dir, out_dir, jobs, verify, resources, strict,
                             progress=not json_out and sys.stderr.isatty(), flags=flags, build_dir=build_dir)
    except UsageError as err:
        print(str(err) if ": error: " in str(err) else f"rtransform convert-all: error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if json_out else shown(format_table(report)))
    return report["exit_code"]
