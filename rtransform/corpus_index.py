"""`rtransform index`: regenerate kernel_corpus/index.json — convert every corpus kernel, evaluate the bindings
at the reference shapes, add ptxas figures when nvcc is found, and optionally verify each instance on the CPU.
The index's data model lives in kernel_corpus/index.py; this is the part that needs the converter's batch tools."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from kernel_corpus.index import (INDEX_PATH, SCHEMA, add_evaluations, carry_over, kernel_entries, reference_shapes,
                                 launch_spec, load_index, smallest_launch)
from rtransform.batch import convert_kernels
from kernel_corpus.bindings import LEGACY_DIR
from toolchain.cxx import template_args_text
from toolchain.files import Inputs, OutputError
from toolchain.demangle import demangle_entry
from toolchain.ptxas import parse_ptxas, run_ptxas
from vdevice import RUNTIME_INCLUDE


def add_resources(entries: dict[tuple[str, str], dict], outputs: dict[str, str], nvcc: str) -> list[str]:
    """Compile each converted source with its instances for sm_90 and store ptxas figures per instance."""
    from kernel_corpus.bindings import LEGACY_DIR
    problems = []
    for source, converted in outputs.items():
        mine = [e for (s, _), e in entries.items() if s == source and e["status"] == "converted" and e["instances"]]
        if not mine:
            continue
        exprs = [expr for e in mine for expr in e["instances"]]
        lines = [converted] + [f"void* __rt_instance_{i}() {{ return (void*)&{x}; }}" for i, x in enumerate(exprs)]
        ok, log = run_ptxas("\n".join(lines) + "\n", nvcc, [str(RUNTIME_INCLUDE), str(LEGACY_DIR)])
        if not ok:
            problems.append(f"{source}: nvcc failed: {log}")
            continue
        found = {demangle_entry(sym): res for sym, res in parse_ptxas(log).items()}
        for e in mine:
            for inst in e["instances"].values():
                res = found.get((e["kernel"].split("::")[-1], template_args_text(inst["template_args"])))
                inst.update(res or {"registers": None})
    return problems


def build_index(previous: dict | None = None, nvcc: str | None = None) -> dict:
    """The whole index as a JSON-ready dict (see the module docstring)."""
    from converter import CONVERTER_VERSION
    from kernel_corpus.bindings import LEGACY_DIR, registry

    texts = {p.name: p.read_text() for p in sorted(LEGACY_DIR.glob("*.cu"))}
    outcomes = {source: convert_kernels(text, str(LEGACY_DIR / source)) for source, text in texts.items()}
    entries: dict[tuple[str, str], dict] = {}
    for source, text in texts.items():
        for name, e in kernel_entries(source, text, outcomes[source]).items():
            entries[(source, name)] = e
    refs = reference_shapes(registry)
    problems = add_evaluations(entries, refs)
    if nvcc:
        problems += add_resources(entries, {s: o.output for s, o in outcomes.items() if o.output}, nvcc)
    carry_over(entries, previous)
    for e in entries.values():
        for inst in e["instances"].values():
            inst.setdefault("verified", "not verified")
    return {"schema": SCHEMA, "generator": "rtransform index", "converter_version": CONVERTER_VERSION,
            "arch": "sm_90", "nvcc": bool(nvcc), "problems": problems,
            "reference_shapes": [s.key(d.op_type) for d, s in refs],
            "rkernels": [entries[k] for k in sorted(entries)]}


def verify_instances(index: dict, jobs: int | None = None) -> list[str]:
    """Verify, per converted kernel, the instance of its smallest reference launch on the CPU.

    Runs `convert-all --verify` over a copy of legacy/ with one generated launch spec per kernel; sets
    `verified` (verified / differs / error) on those instances and returns one line per problem."""
    import shutil
    import tempfile
    import yaml
    from kernel_corpus.bindings import LEGACY_DIR
    from rtransform.batch import convert_all
    chosen: dict[tuple[str, str], str] = {}
    with tempfile.TemporaryDirectory(prefix="corpus-verify-") as tmp:
        src = Path(shutil.copytree(LEGACY_DIR, Path(tmp) / "src"))
        for e in index["rkernels"]:
            found = smallest_launch(e) if e["status"] == "converted" else None
            if found is None:
                continue
            launch, node = found
            name = e["kernel"].split("::")[-1]
            (src / f"{name}.spec.yaml").write_text(yaml.safe_dump(launch_spec(launch, node), sort_keys=False))
            chosen[(e["source"], e["kernel"])] = launch.expr
        report = convert_all(src, Path(tmp) / "out", jobs=jobs, verify=True)
    problems = []
    by_key = {(e["source"], e["kernel"]): e for e in index["rkernels"]}
    for f in report["files"]:
        for k in f["kernels"]:
            expr = chosen.get((f["path"], k["name"]))
            if expr is None:
                continue
            by_key[(f["path"], k["name"])]["instances"][expr]["verified"] = k["verify"]
            if k["verify"] != "verified":
                problems.append(f"{f['path']}: {expr}: {k['verify']}: {k['verify_detail']}")
    return problems


def index_command(output: str | Path = INDEX_PATH, no_nvcc: bool = False, verify: bool = False) -> int:
    """CLI body of `rtransform index`: regenerate the index file, print a summary and the problems."""
    from converter import write_atomic
    from toolchain.nvcc import find_nvcc
    guard = Inputs().folder(LEGACY_DIR, "the corpus's legacy sources", sealed=True)
    try:
        output = guard.check_file(output, "-o")
    except OutputError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    index = build_index(load_index(output), None if no_nvcc else find_nvcc())
    if verify:
        index["problems"] += verify_instances(index)
    write_atomic(output, json.dumps(index, indent=1) + "\n")
    n = len(index["rkernels"])
    conv = sum(e["status"] == "converted" for e in index["rkernels"])
    print(f"{output}: {n} kernels ({conv} converted), {len(index['problems'])} problems", file=sys.stderr)
    for p in index["problems"]:
        print(f"  {p}", file=sys.stderr)
    return 0
