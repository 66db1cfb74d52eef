"""The real-code campaign: every __global__ kernel of fetched repositories, converted, compiled for sm_90, run
legacy and converted on the CPU under the sanitizers, verified; docs/REAL_CODE.md written from the results.

    python3 tests/real_code_campaign.py REPO_DIR... [--timeout 180] [--max-files N] [--only-report] [--md PATH]

Each REPO_DIR is a work tree checked out outside every git worktree of this project (never committed). Results go
to REPO_DIR/../.campaign/<repo>.jsonl, one line per kernel, appended as each kernel finishes: a rerun skips the
kernels already there (resumable; delete the file to redo a repository). Per kernel, in a child process with a
timeout: a launch spec derived from the host code (`rtransform spec --from-host`), the skeleton guess otherwise;
the legacy kernel run with memcheck, racecheck and synccheck; then the verify (the converted rKernel on the
persistent executor, several rTasks per vEU, shuffled, against the legacy outputs). A file's conversion and its
nvcc compile for sm_90 run once per file, in a child of their own.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SUFFIXES = (".cu", ".cuh")
KERNEL_RE = re.compile(r"__global__\b")
SKIP_DIRS = {".git", "build", "third_party", "3rdparty", "external"}
FILE_TIMEOUT_S = 300
KERNEL_TIMEOUT_S = 180
INCLUDE_DIR_NAMES = {"include", "inc", "common", "Common", "utils", "util"}
# A project's own build switches the campaign sets, as its Makefile would (each is stated in docs/REAL_CODE.md):
# PolyBench's documented dataset selector, so its #define sizes (which the kernels read) fit the CPU emulator.
# SHOC's configure script writes config.h (not in the repository) with the timer it finds: on Linux
# HAVE_GETTIMEOFDAY (its common Timer.h stops with #error without one).
# BabelStream's CMake model file passes its defaults: the kernel stride (#error without one) and the unroll factor.
REPO_DEFINES: dict[str, tuple[str, ...]] = {"cavazos-lab+PolyBench-ACC": ("MINI_DATASET",),
                                            "vetter+shoc": ("HAVE_GETTIMEOFDAY",),
                                            "UoB-HPC+BabelStream": ("GRID_STRIDE", "UNROLL_FACTOR=4")}

# Why a kernel was refused or failed, as a class: first matching pattern of its first diagnostic (data table).
REASON_CLASSES: list[tuple[str, str]] = [
    (r"^legacy order-dependent: .*varies between two runs", "legacy result varies between runs (clock readings)"),
    (r"^legacy order-dependent: ", "legacy result depends on block order (races between blocks)"),
    (r"^race read by hand: ", "threads of one block race on global memory (read by hand, listed below)"),
    (r"the original does not compile alone either", "the project's own file does not compile with nvcc here "
     "(exercise placeholders, APIs CUDA 13 removed, library headers not installed)"),
    (r"texture|surface", "texture/surface reference (removed in CUDA 12)"),
    (r"inline PTX asm", "inline PTX asm (not modelled on the CPU emulator)"),
    (r"grid-wide|this_grid|grid_group", "grid-wide synchronisation"),
    (r"dynamic parallelism", "dynamic parallelism"),
    (r"inline asm reads", "inline asm reading hardware indices"),
    (r"through a macro", "intrinsic reached through a macro"),
    (r"a member of a class in", "member of a header's class needs the rTask"),
    (r"operators, constructors", "operator/constructor needs the rTask"),
    (r"candidates need the rTask", "dependent call with mixed candidates"),
    (r"depends on the template arguments", "__shared__ sized by a device function's template arguments"),
    (r"passed as a template argument", "header function passed as template argument"),
    (r"is called as a functor", "texture fetch in a functor template argument"),
    (r"file-scope __shared__", "header's file-scope __shared__"),
    (r"\.(?:cuh|h|hpp):\d+:\d+: error: (?:use of undeclared identifier|unknown type name)[^:]*$",
     "kernel header not self-contained (a name its includer defines)"),
    (r"file not found|not found", "header not found"),
    (r"unknown type name|undeclared identifier|no template named|no member named|no matching",
     "declaration the parse lacks (clang)"),
    (r"timeout", "timeout"),
    (r"memcheck", "memcheck report"),
    (r"racecheck", "racecheck report"),
    (r"synccheck", "synccheck report"),
    (r"yield budget|deadlock|stall", "emulator watchdog (hang or spin)"),
    (r"nothing to compare", "nothing to compare (no buffer argument: printf/assert kernels)"),
    (r"spec|SpecError|no launch", "no runnable spec"),
    (r"error:", "compile or run error"),
]


def reason_class(message: str | None) -> str:
    """The class of a failure message (REASON_CLASSES), or "other"."""
    for pat, name in REASON_CLASSES:
        if message and re.search(pat, message):
            return name
    return "other"


# ---- discovery -------------------------------------------------------------------------------------------------
def defines_kernel(text: str) -> bool:
    """Whether the text defines a __global__ function: one outside a comment whose body follows (a header that
    only declares `void __global__ f(float *x);` for the file that defines it, or a comment that mentions
    `__global__ void`, is no kernel file)."""
    from rtransform.host_spec import strip_comments
    code = strip_comments(text)
    for m in KERNEL_RE.finditer(code):
        brace, semi = code.find("{", m.end()), code.find(";", m.end())
        if brace >= 0 and (semi < 0 or brace < semi):
            return True
    return False


def kernel_files(repo: Path) -> list[Path]:
    """Source files of the repository that define a __global__ function."""
    out = []
    for root, dirs, files in os.walk(repo):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        for f in sorted(files):
            p = Path(root) / f
            if p.suffix in SUFFIXES:
                try:
                    if defines_kernel(p.read_text(encoding="utf-8", errors="replace")):
                        out.append(p)
                except OSError:
                    continue
    return out


def include_dirs(repo: Path, file: Path) -> list[str]:
    """Folders a project's build would put on the include path: the file's own and its parents' include-like
    folders up to the repository root, and the root."""
    dirs: list[str] = []
    d = file.parent
    while True:
        dirs.append(str(d))
        dirs += [str(d / n) for n in sorted(INCLUDE_DIR_NAMES) if (d / n).is_dir()]
        if d == repo or repo not in d.parents:
            break
        d = d.parent
    return list(dict.fromkeys(dirs))


# ---- per file: convert and compile (child process) ---------------------------------------------------------------
def file_job(path: str, incs: list[str], defines: list[str] = ()) -> dict:  # type: ignore[assignment]
    """Kernels of one file: converted or refused (with reason), and whether the converted file compiles for sm_90."""
    from converter import ConversionError, convert_source
    from converter.flags import CompileFlags
    flags = CompileFlags(include_dirs=tuple(incs), defines=tuple(defines))
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    out: dict = {"kernels": {}, "compiled": None, "compile_error": None, "warnings": []}
    try:
        res = convert_source(text, path, flags=flags)
    except ConversionError as e:
        for r in e.refused:
            out["kernels"][r["name"]] = {"converted": False, "reason": r["diagnostics"][0]}
        if not e.refused:
            out["error"] = e.diagnostics[0] if e.diagnostics else "conversion failed"
        _mark_unbuildable(out, path, incs, list(defines))
        return out
    except Exception as e:  # noqa: BLE001 - a converter crash is a result of the campaign, not its end
        out["error"] = f"converter crash: {type(e).__name__}: {e}"
        return out
    out["warnings"] = res.warnings[:5]
    for m in res.rkernels:
        out["kernels"][m.name] = {"converted": True, "template": bool(m.template_params)}
    for r in res.refused:
        out["kernels"][r["name"]] = {"converted": False, "reason": r["diagnostics"][0]}
    out["compiled"], out["compile_error"] = compile_sm90(res.output, path, incs, list(defines))
    _mark_unbuildable(out, path, incs, list(defines))
    return out


_CLANG_ERROR = re.compile(r"error: (use of undeclared identifier|unknown type name|no matching|no member named|"
                          r"expected|not a CUDA/C\+\+ source)")


def _mark_unbuildable(out: dict, path: str, incs: list[str], defines: list[str]) -> None:
    """Refusals that are clang's errors in a file nvcc cannot compile either (an exercise's FIXME, a removed API)
    are the project's own state, said so in the reason."""
    bad = [k for k in out["kernels"].values() if not k["converted"] and _CLANG_ERROR.search(k.get("reason") or "")]
    if out.get("error") and _CLANG_ERROR.search(out["error"]):
        bad.append(out)
    if not bad:
        return
    ok, err = compile_sm90(Path(path).read_text(encoding="utf-8", errors="replace"), path, incs, defines,
                           original=True)
    if not ok:
        for k in bad:
            key = "reason" if "reason" in k else "error"
            k[key] = f"the original does not compile alone either ({err}); {k[key]}"


def compile_sm90(converted: str, path: str, incs: list[str], defines: list[str],
                 original: bool = False) -> tuple[bool, str | None]:
    """nvcc -arch=sm_90 -c of the converted text (beside the original, so its local headers resolve)."""
    from toolchain.nvcc import find_nvcc
    from toolchain.stubs import HOST_STUBS  # vendor headers the machine lacks (cuBLAS...), searched last
    from vdevice import RUNTIME_INCLUDE
    nvcc = find_nvcc()
    if nvcc is None:
        return False, "no nvcc"
    src = Path(path).with_name(Path(path).stem + ".rtcampaign.cu")
    try:
        src.write_text(converted)
        def nvcc_ptx(file: Path) -> subprocess.CompletedProcess:
            cmd = [nvcc, "-arch=sm_90", "-std=c++17", "-ptx", "-w", f"-I{RUNTIME_INCLUDE}", *[f"-I{d}" for d in incs],
                   *[f"-D{d}" for d in defines], "-Xcompiler", f"-idirafter{HOST_STUBS}", str(file), "-o", os.devnull]
            return subprocess.run(cmd, capture_output=True, text=True, timeout=FILE_TIMEOUT_S)
        r = nvcc_ptx(src)
        if r.returncode == 0:
            return True, None
        err = next((ln for ln in (r.stderr + r.stdout).splitlines() if "error" in ln), (r.stderr or "")[:300])
        if original:
            return False, err.replace(str(src), path)[:300]
        if nvcc_ptx(Path(path)).returncode != 0:  # the project's own file does not build this way either
            err = "the original does not compile alone either: " + err
        return False, err.replace(str(src), path)[:400]
    except subprocess.TimeoutExpired:
        return False, "nvcc timeout"
    finally:
        src.unlink(missing_ok=True)


# ---- per kernel: spec, legacy run, verify (child process) ----------------------------------------------------------
def kernel_job(path: str, kernel: str, incs: list[str], work: str, hosts: list[str],
               defines: list[str] = ()) -> dict:  # type: ignore[assignment]
    """Spec (from the host code, else the skeleton), legacy run under the sanitizers, then the verify."""
    from converter.flags import CompileFlags
    from rtransform.run import launch, make_module, prepare
    from rtransform.spec import make_inputs
    from rtransform.verify import SANITIZE_ALL, verify_file
    flags = CompileFlags(include_dirs=tuple(incs), defines=tuple(defines))
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    rec: dict = {}
    spec_path = Path(work) / (re.sub(r"\W", "_", kernel) + ".spec.yaml")
    try:
        rec["spec_source"], rec["spec_notes"], spec_text = derive_spec(text, path, kernel, flags, hosts)
        spec_path.write_text(spec_text)
    except Exception as e:  # noqa: BLE001
        rec["legacy"] = f"no spec: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return rec
    if "outputs: []" in spec_text or not re.search(r"kind: buffer", spec_text):
        rec["legacy"] = "nothing to compare: the kernel takes no buffer (printf/assert only)"
        return rec
    try:
        prep = prepare(path, str(spec_path), flags=flags)
        mod = make_module("cpu", prep.build_source(prep.text), [prep.spec.kernel_expr()], prep.include_dirs,
                          SANITIZE_ALL, prep.file, prep.flags.defines)
        launch(mod, prep.spec.kernel_expr(), prep.spec.grid, prep.spec.block, prep.spec.dynamic_smem,
               make_inputs(prep.spec))
        rec["legacy"] = "ok"
    except Exception as e:  # noqa: BLE001
        rec["legacy"] = _one_line(e)
        return rec
    try:
        result = verify_file(path, str(spec_path), flags=flags)
        rec["verify"] = {"verified": "verified", "differs": "differs: "}.get(result.outcome, "legacy order-dependent: ")
        if not result.ok:
            rec["verify"] += result.summary()[:400]
    except Exception as e:  # noqa: BLE001
        rec["verify"] = "error: " + _one_line(e)
    return rec


def derive_spec(text: str, path: str, kernel: str, flags, hosts: list[str]) -> tuple[str, list[str], str]:
    """('host' | 'skeleton', notes, YAML): the host code's launch when it yields a spec, else the skeleton."""
    from rtransform.host_spec import HostSpecError, spec_from_host
    from rtransform.skeleton import spec_skeleton
    host_texts = {h: Path(h).read_text(encoding="utf-8", errors="replace") for h in hosts if h != path}
    try:
        hs = spec_from_host(text, path, kernel, flags=flags, host_texts=host_texts)
        return "host", hs.notes, hs.yaml
    except HostSpecError as e:
        return "skeleton", [str(e)], spec_skeleton(text, path, kernel, flags)


def launching_files(repo: Path) -> dict[str, str]:
    """Files of the repository with host code that launches kernels (path -> text)."""
    out = {}
    for root, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        for f in files:
            if f.endswith((".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")):
                p = Path(root) / f
                try:
                    t = p.read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
                if "<<<" in t or "cudaLaunch" in t:
                    out[str(p)] = t
    return out


def host_files_for(kernel: str, path: str, launchers: dict[str, str], limit: int = 8,
                   includes: dict[str, set[str]] | None = None) -> list[str]:
    """The launching files that name the kernel and belong with its file: beside it, or including it, directly or
    through local headers (`utils.cu` includes `kernel.cuh`, which includes `kernel/kernel_2.cuh`; `includes` from
    include_closure) (samples reuse kernel names across folders: another folder's `testKernel` is another kernel)."""
    short = kernel.rsplit("::", 1)[-1]
    pat = re.compile(rf"\b{re.escape(short)}\b")
    own = Path(path)
    inc = re.compile(rf'#\s*include\s*["<][^">]*\b{re.escape(own.name)}[">]')
    return [p for p, t in launchers.items() if pat.search(t)
            and (Path(p).parent == own.parent or inc.search(t) or str(own.resolve()) in (includes or {}).get(p, ()))][:limit]


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*["<]([^">]+)[">]', re.M)


def include_closure(repo: Path, launchers: dict[str, str], depth: int = 4) -> dict[str, set[str]]:
    """Per launching file, the repository files it includes, directly or through the files those include (`depth`
    levels): a quoted or angled name resolved beside its includer, else against the repository's files whose path
    ends with it (a project's -I folders)."""
    by_name: dict[str, list[Path]] = {}
    for root, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        for f in files:
            by_name.setdefault(f, []).append(Path(root) / f)
    texts: dict[Path, str] = {}

    def includes_of(f: Path) -> list[Path]:
        if f not in texts:
            try:
                texts[f] = f.read_text(encoding="utf-8", errors="replace")
            except OSError:
                texts[f] = ""
        out = []
        for name in _INCLUDE.findall(texts[f]):
            near = f.parent / name
            if near.is_file():
                out.append(near.resolve())
                continue
            tail = "/" + name.lstrip("./")
            out += [c.resolve() for c in by_name.get(Path(name).name, []) if str(c).endswith(tail)][:1]
        return out

    closure: dict[str, set[str]] = {}
    for p in launchers:
        seen: set[Path] = set()
        todo = [Path(p)]
        for _ in range(depth):
            todo = [g for f in todo for g in includes_of(f) if g not in seen]
            seen.update(todo)
        closure[p] = {str(s) for s in seen}
    return closure


def _one_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return (f"{type(e).__name__}: " + (s[0] if s else ""))[:400]


# ---- orchestration -----------------------------------------------------------------------------------------------
def child(func: str, payload: dict, timeout: float) -> dict:
    """Runs file_job / kernel_job in a fresh interpreter (crash and hang isolation), niced."""
    cmd = ["nice", "-n", "10", sys.executable, __file__, "--child", func, json.dumps(payload)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(REPO))
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s"}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("@@RESULT ")]
    if not lines:
        tail = (r.stderr or r.stdout).strip().splitlines()
        return {"error": f"child died (rc {r.returncode}): " + (tail[-1] if tail else "")[:300]}
    return json.loads(lines[-1][len("@@RESULT "):])


def run_repo(repo: Path, out: Path, kernel_timeout: float, shard: tuple[int, int] = (0, 1),
             max_files: int | None = None, only: str | None = None) -> None:
    """Every kernel of one repository (of its files k with k % n == i, for --shard i/n), appended to `out` as it
    finishes (one whole line per write: shards of one repository share the file); kernels already there are
    skipped; at most `max_files` files not done before are run (a large repository is sampled in steps); `only`: just
    the files whose path matches that regular expression."""
    done = {(r["file"], r["kernel"]) for r in read_records(out)}
    done_files = {r["file"] for r in read_records(out) if r.get("file_done")}
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    work = out.parent / (out.stem + ".work")
    work.mkdir(parents=True, exist_ok=True)
    launchers = launching_files(repo)
    includes = include_closure(repo, launchers)
    for k, f in enumerate(kernel_files(repo)):
        if k % shard[1] != shard[0]:
            continue
        rel = str(f.relative_to(repo))
        if rel in done_files or (only is not None and not re.search(only, rel)):
            continue
        if max_files is not None and max_files <= 0:
            break
        max_files = None if max_files is None else max_files - 1
        incs = include_dirs(repo, f)
        t0 = time.time()
        defines = list(REPO_DEFINES.get(repo.name, ()))
        fres = child("file_job", {"path": str(f), "incs": incs, "defines": defines}, FILE_TIMEOUT_S)
        kernels = fres.get("kernels") or {}
        if not kernels:
            names = re.findall(r"__global__[^(;{]*?\b(\w+)\s*\(", f.read_text(encoding="utf-8", errors="replace"))
            reason = fres.get("error") or "no kernel found by the converter"
            kernels = {n: {"converted": False, "reason": reason} for n in dict.fromkeys(names)} if names else {}
        for name, k in kernels.items():
            if (rel, name) in done:
                continue
            rec = {"repo": repo.name, "commit": commit, "file": rel, "kernel": name, "converted": k["converted"],
                   "reason": k.get("reason"), "compiled": fres.get("compiled") if k["converted"] else None,
                   "compile_error": fres.get("compile_error") if k["converted"] else None}
            if k["converted"]:
                rec.update(child("kernel_job", {"path": str(f), "kernel": name, "incs": incs, "work": str(work),
                                                "hosts": host_files_for(name, str(f), launchers, includes=includes),
                                                "defines": defines},
                                 kernel_timeout))
                if "error" in rec and "legacy" not in rec:
                    rec["legacy"] = rec.pop("error")
            append(out, rec)
        append(out, {"repo": repo.name, "commit": commit, "file": rel, "kernel": "", "file_done": True,
                     "seconds": round(time.time() - t0, 1)})


KERNEL_KEYS = ("spec_source", "spec_notes", "legacy", "verify")  # what kernel_job writes into a record


def _skeleton_despite_launch(r: dict) -> bool:
    """A converted kernel whose host code launches it but whose spec came from the skeleton guess."""
    notes = r.get("spec_notes") or [""]
    return bool(r.get("converted")) and r.get("spec_source") == "skeleton" and not str(notes[0]).startswith(
        "no launch of")


def redo_specs(repo: Path, out: Path, kernel_timeout: float) -> None:
    """Run again, with the current host_spec, the kernels whose spec fell back to the skeleton although their
    host code launches them (their file's conversion and compile do not change); each record replaced in place."""
    recs = read_records(out)
    launchers = launching_files(repo)
    includes = include_closure(repo, launchers)
    work = out.parent / (out.stem + ".work")
    defines = list(REPO_DEFINES.get(repo.name, ()))
    for k, r in enumerate(recs):
        if r.get("file_done") or not _skeleton_despite_launch(r):
            continue
        f = repo / r["file"]
        res = child("kernel_job", {"path": str(f), "kernel": r["kernel"], "incs": include_dirs(repo, f),
                                   "work": str(work),
                                   "hosts": host_files_for(r["kernel"], str(f), launchers, includes=includes),
                                   "defines": defines}, kernel_timeout)
        if "error" in res and "legacy" not in res:
            res["legacy"] = res.pop("error")
        recs[k] = {**{key: v for key, v in r.items() if key not in KERNEL_KEYS}, **res}
        _rewrite(out, recs)


def _rewrite(path: Path, recs: list[dict]) -> None:
    """The records file replaced atomically."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in recs))
    os.replace(tmp, path)


def forget_files(path: Path, pattern: str) -> None:
    """Forget the records (and the markers) of the files whose path matches `pattern`: they run again."""
    keep = [r for r in read_records(path) if not re.search(pattern, r["file"])]
    _rewrite(path, keep)


def forget_failed(path: Path) -> None:
    """Keep only the verified kernels' records (atomically): the others run again with the current code."""
    recs = read_records(path)
    redo = {r["file"] for r in recs if not r.get("file_done") and outcome(r) != "verified"}
    keep = [r for r in recs if r["file"] not in redo or (not r.get("file_done") and outcome(r) == "verified")]
    _rewrite(path, keep)


def read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def append(path: Path, rec: dict) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps(rec) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


# ---- the report ----------------------------------------------------------------------------------------------
# Differences read by hand as the kernel's own race on the spec's inputs (CUDA orders neither side), each with the
# check that shows it: (repository, kernel) -> why. The doc lists them.
RACES_BY_HAND: dict[tuple[str, str], str] = {
    ("vetter+shoc", "kernelBackprop3a"):
        "with b_off == b_off_old (the derived spec) thread 0 zeroes delta_nabla_b[b_off] while threads of other warps "
        "read it with no barrier; with disjoint offsets (b_off_old = 1024, bound = 8) it verifies",
    ("NVIDIA+cuda-samples", "kernCacheSegmentTest"):
        "every thread of every block does unsynchronised read-modify-writes of data[psRand % dataSize] and "
        "trash[psRand % bigDataSize] until a shared counter that all of them increment reaches hitCount (a cache "
        "stress demo: the sample checks no output); threads of one block race, so even the rKernel in the legacy "
        "block order on one vEU gives other values (2026-11-27: the legacy kernel gives the same in two runs and "
        "another result in the reverse block order; the rKernel's thread interleaving inside a block differs)",
    **{("NVIDIA+cuda-samples", k):
       "the derived spec's ImgStride is 1 ('(int)DeviceStride' from cudaMallocPitch is not derived), so the 8 rows "
       "each thread writes overlap other threads' and blocks' rows: threads of one block write the same dst elements "
       "after the last barrier; with ImgStride = 256 (the spec's own Size.width) and 65536-element buffers "
       "`rtransform verify` says verified (2026-11-27)" for k in ("CUDAkernel2DCT", "CUDAkernel2IDCT")},
}


def _race_by_hand(r: dict) -> bool:
    return (r.get("repo", ""), r.get("kernel", "")) in RACES_BY_HAND


def outcome(r: dict) -> str:
    """One kernel's final state, for the tables."""
    if not r["converted"]:
        return "refused"
    if str(r.get("legacy", "")).startswith("nothing to compare"):
        return "nothing to compare"
    if r.get("legacy") != "ok":
        return "legacy fails"
    v = r.get("verify", "")
    if v.startswith("legacy order-dependent") or (v.startswith("differs") and _race_by_hand(r)):
        return "order-dependent"
    return "verified" if v == "verified" else ("differs" if v.startswith("differs") else "verify error")


def inventory(repo: Path) -> tuple[int, int]:
    """(files with a __global__ function, __global__ functions found by a plain text search) of a repository."""
    files = kernel_files(repo)
    found = sum(len(re.findall(r"__global__[^(;{]*?\b\w+\s*\(", f.read_text(encoding="utf-8", errors="replace")))
                for f in files)
    return len(files), found


def report(records: list[dict], inv: dict[str, tuple[int, int]] | None = None) -> str:
    """docs/REAL_CODE.md: per repository counts, the refusals and failures by class, and the commits."""
    inv = inv or {}
    ks = [r for r in records if not r.get("file_done")]
    repos = sorted({r["repo"] for r in ks})
    lines = ["# Real code: every kernel of public CUDA repositories", "",
             "Regenerated by `python3 tests/real_code_campaign.py REPO_DIR...` (then `--only-report`) from work trees "
             "of the repositories below, checked out outside this project and never committed. Per kernel: convert "
             "(`rtransform convert`), compile the converted file for sm_90 (nvcc), derive a launch spec from the host "
             "code (`rtransform spec --from-host`; the skeleton guess where that fails), run the legacy kernel on "
             "the CPU emulator under memcheck, racecheck and synccheck, and verify (the rKernel on the persistent "
             "executor: several rTasks per vEU, shuffled, surplus threads) against the legacy outputs.", "",
             "Build switches set as the projects' own builds would: "
             + ", ".join(f"{r}: " + " ".join(f"-D{d}" for d in ds) for r, ds in REPO_DEFINES.items())
             + " (PolyBench's documented dataset selector: the kernels read its sizes as constants; the timer SHOC's "
             "configure script finds on Linux, which its generated config.h would define; BabelStream's CMake defaults "
             "for the kernel stride and unroll factor). Include paths: the "
             "file's folder and its parents' `include`/`inc`/`common`/`Common`/`utils` folders up to the root.", "",
             "`compiled`: converted kernels whose file compiles for sm_90, of those whose project's own file "
             "compiles here (CUDA 13 removed `cudaThreadSynchronize` and texture references; cuBLAS and PyTorch "
             "headers are not installed).", "",
             "`legacy order-dep.`: the rKernel differs from the legacy run, and `rtransform verify` finds the cause "
             "in the legacy kernel itself (its exit code 4): run with its blocks in the order under which the rKernel "
             "differed, the legacy kernel gives the rKernel's result (races between blocks: an atomicExch's last "
             "writer, blocks that read what others write), or two runs of it in the same order differ (clock() "
             "readings); plus the races read by hand listed below. CUDA leaves these results open, so there is "
             "nothing to verify: the headline rate's denominator is **the kernels whose legacy run works and is "
             "block-order independent** (legacy runs minus this column); the rate over all kernels whose legacy run "
             "works is printed beside it. `no output`: kernels without a buffer argument (printf/assert demos), "
             "nothing to compare.", "",
             "`files`: files done of the repository's files with a `__global__` function (the campaign is resumable; "
             "a repository not finished shows fewer).", "",
             "| repository | commit | files | kernels | converted | compiled | legacy runs | verified | differs | "
             "legacy order-dep. | verify error | no output | refused |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    tot: Counter = Counter()
    for repo in repos:
        rs = [r for r in ks if r["repo"] == repo]
        c = Counter(outcome(r) for r in rs)
        row = Counter(kernels=len(rs), converted=sum(r["converted"] for r in rs),
                      compiled=sum(bool(r.get("compiled")) for r in rs),
                      buildable=sum(r["converted"] and not _original_fails(r) for r in rs),
                      legacy=sum(r.get("legacy") == "ok" for r in rs), verified=c["verified"], differs=c["differs"],
                      order=c["order-dependent"], error=c["verify error"], nothing=c["nothing to compare"],
                      refused=c["refused"])
        tot.update(row)
        done = len({r["file"] for r in records if r["repo"] == repo and r.get("file_done")})
        files = f"{done} of {inv[repo][0]}" if repo in inv else str(done)
        lines.append(f"| {repo} | {rs[0]['commit'][:10]} | {files} | {row['kernels']} | {row['converted']} | "
                     f"{row['compiled']} of {row['buildable']} | "
                     f"{row['legacy']} | {row['verified']} | {row['differs']} | {row['order']} | {row['error']} | "
                     f"{row['nothing']} | {row['refused']} |")
    lines.append(f"| **total** | | | {tot['kernels']} | {tot['converted']} | {tot['compiled']} of {tot['buildable']} | "
                 f"{tot['legacy']} | {tot['verified']} | {tot['differs']} | {tot['order']} | {tot['error']} | "
                 f"{tot['nothing']} | {tot['refused']} |")
    legacy_ok = tot["legacy"]
    rate = f"{100 * tot['verified'] / legacy_ok:.1f}%" if legacy_ok else "n/a"
    fixed = legacy_ok - tot["order"]  # legacy runs whose result the block order does not change
    fixed_rate = f"{100 * tot['verified'] / fixed:.1f}%" if fixed else "n/a"
    host = [r for r in ks if r["converted"] and r.get("spec_source")]
    host_ok = [r for r in host if r["spec_source"] == "host" and r.get("legacy") == "ok"]
    launched = [r for r in host if r["spec_source"] == "host" or not any(
        str(n).startswith("no launch of") for n in r.get("spec_notes") or [])]
    lines += ["", f"Of the kernels whose legacy run works and is block-order independent, **{tot['verified']} of "
              f"{fixed} verify ({fixed_rate})**; {tot['differs']} differ between legacy and converted. Of all "
              f"{legacy_ok} kernels whose legacy run works, {tot['verified']} verify ({rate}); the other "
              f"{tot['order']} are the legacy order-dependent ones and {tot['error']} verify errors. **--from-host derived a spec that runs for {len(host_ok)} of the {len(launched)} converted "
              f"kernels whose host code launches them ({100 * len(host_ok) / max(1, len(launched)):.0f}%)**. Specs: {sum(r['spec_source'] == 'host' for r in host)} "
              f"of {len(host)} converted kernels got theirs from the host code, {len(host_ok)} of those ran.", ""]
    lines += _class_table("Refused (conversion)", [r.get("reason") for r in ks if not r["converted"]])
    lines += _class_table("Legacy run fails (spec or kernel)", [r.get("legacy") for r in ks
                                                                if r["converted"] and r.get("legacy") != "ok"])
    lines += _class_table("Verify differs or breaks", [("race read by hand: " if _race_by_hand(r) else "")
                                                       + r.get("verify", "") for r in ks
                                                       if r.get("legacy") == "ok" and r.get("verify") != "verified"])
    dep = [r for r in ks if r.get("verify", "").startswith("legacy order-dependent")]
    if dep:
        lines += ["Legacy order-dependent (`rtransform verify` exit 4), each with verify's line:", ""]
        lines += [f"- {r['repo']} {r['file']} {r['kernel']}: "
                  + r["verify"].removeprefix("legacy order-dependent: ")[:300].replace("|", "\\|") for r in dep]
        lines.append("")
    raced = [r for r in ks if r.get("verify", "").startswith("differs") and _race_by_hand(r)]
    if raced:
        lines += ["Counted as legacy order-dependent after a check by hand (threads of one block race on global "
                  "memory, which the sanitizers do not check and no block order reproduces):", ""]
        lines += [f"- {r['repo']} {r['file']} {r['kernel']}: {RACES_BY_HAND[(r['repo'], r['kernel'])]}" for r in raced]
        lines.append("")
    lines += _class_table("Converted file does not compile for sm_90", [r.get("compile_error") for r in ks
                                                                        if r["converted"] and not r.get("compiled")])
    return "\n".join(lines) + "\n"


KEPT_HEADING = "## Measured changes"  # written by hand (sessions' before/after runs): a regenerated report keeps it


def kept_sections(old_report: str) -> str:
    """The hand-written tail of a report, from its KEPT_HEADING line on ("" when it has none)."""
    i = old_report.find("\n" + KEPT_HEADING)
    return "\n" + old_report[i + 1:] if i >= 0 else ""


def _original_fails(r: dict) -> bool:
    return bool(r.get("compile_error")) and "the original does not compile alone either" in r["compile_error"]


def _class_table(title: str, messages: list[str | None]) -> list[str]:
    if not messages:
        return []
    by: dict[str, list[str]] = {}
    for m in messages:
        by.setdefault(reason_class(m), []).append(m or "")
    out = [f"## {title}: {len(messages)}", "", "| class | kernels | example |", "|---|---|---|"]
    for cls, ms in sorted(by.items(), key=lambda kv: -len(kv[1])):
        ex = re.sub(r"/\S*/realcode/[^/]+/", "", ms[0]).replace("|", "\\|")[:220]
        out.append(f"| {cls} | {len(ms)} | {ex} |")
    return out + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repos", nargs="*", type=Path)
    ap.add_argument("--timeout", type=float, default=KERNEL_TIMEOUT_S, help="seconds per kernel")
    ap.add_argument("--only-report", action="store_true", help="write the report from the records only")
    ap.add_argument("--shard", default="0/1", help="i/n: only the files k with k %% n == i (parallel campaigns)")
    ap.add_argument("--redo-failed", action="store_true",
                    help="forget the kernels that did not verify (and their files' markers), to run them again")
    ap.add_argument("--redo-specs", action="store_true",
                    help="run again the kernels whose host code launches them but whose spec was the skeleton's")
    ap.add_argument("--redo-files", metavar="REGEX", default=None,
                    help="forget the records of the files whose path (in the repository) matches REGEX and run "
                         "those files again (only those)")
    ap.add_argument("--max-files", type=int, default=None,
                    help="per repository, run at most this many files not done before (then report)")
    ap.add_argument("--md", type=Path, default=REPO / "docs" / "REAL_CODE.md")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        payload = json.loads(a.child[1])
        res = {"file_job": file_job, "kernel_job": kernel_job}[a.child[0]](**payload)
        print("@@RESULT " + json.dumps(res))
        return
    records: list[dict] = []
    for repo in a.repos:
        repo = repo.resolve()
        out = repo.parent / ".campaign" / f"{repo.name}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        if a.redo_failed:
            forget_failed(out)
        if a.redo_files:
            forget_files(out, a.redo_files)
        if a.redo_specs:
            redo_specs(repo, out, a.timeout)
        if not a.only_report:
            i, n = (int(x) for x in a.shard.split("/"))
            run_repo(repo, out, a.timeout, (i, n), a.max_files, a.redo_files)
        files = {str(f.relative_to(repo)) for f in kernel_files(repo)}  # records of files no longer counted drop
        records += [r for r in read_records(out) if r["file"] in files]
    a.md.write_text(report(records, {r.resolve().name: inventory(r.resolve()) for r in a.repos})
                    + kept_sections(a.md.read_text() if a.md.exists() else ""))
    print(f"{a.md}: {len([r for r in records if not r.get('file_done')])} kernels", file=sys.stderr)


if __name__ == "__main__":
    main()
