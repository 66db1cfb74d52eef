"""ONNX's own operator conformance cases (`onnx.backend.test.case.node`) built with `rammer build --target cpu`'s
Python API and run on the CPU emulator; the truth is the expected outputs the ONNX project ships with each case.

Cases are selected by op type (tests/onnx_conformance.yaml `ops`): every single-node case of those op types whose
floating tensors are float32. As exporters emit them, integer inputs (shapes, axes, indices) and the inputs named
in `constant_inputs` become initializers. The cases of one op type and opset are merged into one model (names
prefixed per case), so one build (one g++ compile, cached by content under ~/.cache/rammer) runs them all.
Cases listed under `known` in the YAML file are expected to fail (a one-line reason each); one that passes must
leave the list, so the list only shrinks.

Run it as a script for a table of outcomes: `python3 tests/onnx_conformance.py [--ops A,B] [--json]`.
"""
from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import yaml
from onnx import helper, numpy_helper

LIST_FILE = Path(__file__).with_name("onnx_conformance.yaml")
VEUS = 4


@dataclass(frozen=True)
class Selection:
    """What the suite runs: op types, float inputs to turn into constants per op, the known failures."""

    ops: tuple[str, ...]
    constant_inputs: dict[str, tuple[int, ...]]
    known: dict[str, str]
    fold_only: tuple[str, ...] = ()  # ops whose cases may have every input constant (built as a constant fold)
    as_float32: tuple[str, ...] = ()  # ops whose cases ship float64 data only: run in float32
    onnxruntime_truth: dict[str, str] = field(default_factory=dict)  # case -> why its shipped data is not the truth


@dataclass
class Case:
    """One conformance case as exported: a model whose constant operands are initializers, its data sets."""

    name: str
    op_type: str
    opset: int
    model: onnx.ModelProto
    data: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray]]]  # (feeds, expected outputs) per data set
    rtol: float
    atol: float


@dataclass
class Outcome:
    """What happened to one case: pass | wrong | refused | error, with one line of detail."""

    case: str
    op_type: str
    status: str
    detail: str = ""
    seconds: float = 0.0


@dataclass
class Group:
    """The cases of one op type and opset, built as one model."""

    op_type: str
    opset: int
    cases: list[Case] = field(default_factory=list)

    @property
    def key(self) -> str:
        """'Op-opsetN', the pytest id."""
        return f"{self.op_type}-opset{self.opset}"


def load_selection(path: Path = LIST_FILE) -> Selection:
    """The YAML list: ops, constant_inputs (op -> input positions) and known (case -> reason)."""
    data = yaml.safe_load(path.read_text())
    return Selection(tuple(data["ops"]), {k: tuple(v) for k, v in (data.get("constant_inputs") or {}).items()},
                     dict(data.get("known") or {}), tuple(data.get("fold_only") or ()),
                     tuple(data.get("as_float32") or ()), dict(data.get("onnxruntime_truth") or {}))


@lru_cache(maxsize=1)
def _all_cases() -> tuple:
    """Every node test case of the installed onnx package (generated in memory, about 3 s)."""
    from onnx.backend.test.case import node as node_cases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tuple(c for c in node_cases.collect_testcases(None) if c.model is not None)


def _is_float32_case(model: onnx.ModelProto) -> bool:
    """Every floating tensor among the graph inputs and outputs is float32."""
    floats = {onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16}
    for vi in [*model.graph.input, *model.graph.output]:
        if not vi.type.HasField("tensor_type") or vi.type.tensor_type.elem_type in floats:
            return False
        if vi.type.tensor_type.elem_type > onnx.TensorProto.BFLOAT16:  # float8 and 4-bit types
            return False
    return True


def collect(selection: Selection) -> list[Case]:
    """The single-node float32 cases of the selected op types, as exporters would write them (a case left with
    no runtime input tests only constant folding: kept for the `fold_only` ops)."""
    out = []
    for raw in _all_cases():
        g = raw.model.graph
        if len(g.node) != 1 or g.node[0].op_type not in selection.ops or g.node[0].domain not in ("", "ai.onnx"):
            continue
        if g.node[0].op_type in selection.as_float32:
            raw = narrowed(raw)
        if not _is_float32_case(raw.model):
            continue
        case = as_exported(raw, selection.constant_inputs.get(g.node[0].op_type, ()))
        if case.name in selection.onnxruntime_truth:
            case = with_onnxruntime_truth(case)
        if case.model.graph.input or case.op_type in selection.fold_only:
            out.append(case)
    return out


def with_onnxruntime_truth(case: Case) -> Case:
    """The case with onnxruntime's outputs as its expected ones (for cases whose shipped data contradicts the
    operator's text; onnxruntime follows the text)."""
    import onnxruntime as ort
    sess = ort.InferenceSession(case.model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    data = [(feeds, dict(zip(names, sess.run(None, feeds)))) for feeds, _ in case.data]
    return dataclasses.replace(case, data=data)


def narrowed(raw: Any) -> Any:
    """A float64 case as float32: graph inputs, outputs and data narrowed (other cases unchanged)."""
    model = onnx.ModelProto()
    model.CopyFrom(raw.model)
    for vi in [*model.graph.input, *model.graph.output]:
        if vi.type.tensor_type.elem_type == onnx.TensorProto.DOUBLE:
            vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    f32 = lambda arrays: [np.asarray(a, np.float32) if np.asarray(a).dtype == np.float64 else a  # noqa: E731
                          for a in arrays]
    return dataclasses.replace(raw, model=model, data_sets=[(f32(ins), f32(outs)) for ins, outs in raw.data_sets])


def as_exported(raw: Any, float_constants: tuple[int, ...]) -> Case:
    """Integer and bool-free parameter inputs (and the listed float ones) become initializers, as exporters emit
    them; the first data set gives their values (a case whose data sets differ in them keeps only the first)."""
    model = onnx.ModelProto()
    model.CopyFrom(raw.model)
    g, node = model.graph, model.graph.node[0]
    names = [vi.name for vi in g.input]
    inputs0 = raw.data_sets[0][0]
    constant = {}
    for pos, name in enumerate(node.input):
        if not name or name not in names:
            continue
        value = np.asarray(inputs0[names.index(name)])
        if value.dtype.kind in "iu" or pos in float_constants:
            constant[name] = value
    for name, value in constant.items():
        g.initializer.append(numpy_helper.from_array(value, name))
    kept = [vi for vi in g.input if vi.name not in constant]
    del g.input[:]
    g.input.extend(kept)
    data = []
    for ins, outs in raw.data_sets[:1]:
        feeds = {n: np.asarray(v) for n, v in zip(names, ins) if n not in constant}
        expected = {vi.name: np.asarray(v) for vi, v in zip(g.output, outs)}
        data.append((feeds, expected))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    return Case(raw.name, node.op_type, opset, model, data, float(raw.rtol), float(raw.atol))


def refusal(model: onnx.ModelProto) -> str | None:
    """None when the scheduler accepts the model, else the first line of why not (nothing is compiled)."""
    from scheduler.graph import SchedulerError
    from scheduler.pipeline import load_workload
    try:
        load_workload(model)
    except SchedulerError as exc:
        return str(exc).splitlines()[0][:300]
    return None


def _prefixed(case: Case, k: int) -> tuple[list, list, list, list, list]:
    """The case's nodes, inputs, outputs, initializers and value infos with every name prefixed `cK_`."""
    p = f"c{k}_"
    rename = lambda n: p + n if n else n  # noqa: E731
    g = onnx.GraphProto()
    g.CopyFrom(case.model.graph)
    for node in g.node:
        node.name = p + (node.name or node.op_type)
        node.input[:] = [rename(n) for n in node.input]
        node.output[:] = [rename(n) for n in node.output]
    for items in (g.input, g.output, g.initializer, g.value_info):
        for item in items:
            item.name = rename(item.name)
    return list(g.node), list(g.input), list(g.output), list(g.initializer), list(g.value_info)


def merged_model(cases: list[Case]) -> onnx.ModelProto:
    """One model computing every case side by side (one opset; names prefixed per case)."""
    nodes, inputs, outputs, inits, infos = [], [], [], [], []
    for k, case in enumerate(cases):
        n, i, o, init, vi = _prefixed(case, k)
        nodes += n
        inputs += i
        outputs += o
        inits += init
        infos += vi
    graph = helper.make_graph(nodes, "conformance", inputs, outputs, initializer=inits, value_info=infos)
    first = cases[0].model
    model = helper.make_model(graph, opset_imports=list(first.opset_import))
    model.ir_version = max(c.model.ir_version for c in cases)
    return model


def compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str | None:
    """None when `got` matches the expected output (NaN where it is NaN), else one line saying how not."""
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {list(got.shape)}, expected {list(want.shape)}"
    if want.dtype.kind not in "fc":
        bad = int(np.count_nonzero(got != want))
        return f"{bad} element(s) differ" if bad else None
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    nan_bad = int(np.count_nonzero(np.isnan(g64) != np.isnan(w64)))
    if nan_bad:
        return f"{nan_bad} element(s) NaN where the expected output is not (or the reverse)"
    both = ~np.isnan(w64)
    with np.errstate(invalid="ignore"):
        diff = np.abs(g64[both] - w64[both])
    bound = atol + rtol * np.abs(w64[both])
    inf_bad = np.isinf(w64[both]) & (g64[both] != w64[both])
    worst = int(np.count_nonzero((diff > bound) | inf_bad))
    if worst:
        return f"{worst} element(s) off, max |diff| {float(np.nanmax(diff)):.3g} (rtol {rtol}, atol {atol})"
    return None


def run_group(cases: list[Case], workdir: Path) -> list[Outcome]:
    """Build the merged model of accepted cases for the CPU target, run every data set, compare each case."""
    from rammer.build import build_model
    from scheduler.graph import SchedulerError
    if not cases:
        return []
    t0 = time.perf_counter()
    path = workdir / f"{cases[0].op_type}.onnx"
    onnx.save(merged_model(cases), str(path))
    try:
        built = build_model(path, workdir / f"{cases[0].op_type}-build", target="cpu", veus=VEUS, quiet=True)
    except SchedulerError as exc:
        return [Outcome(c.name, c.op_type, "error", f"group build: {str(exc).splitlines()[0][:300]}")
                for c in cases]
    outcomes = []
    for n_set in range(max(len(c.data) for c in cases)):
        feeds = {f"c{k}_{name}": v for k, c in enumerate(cases) if n_set < len(c.data)
                 for name, v in c.data[n_set][0].items()}
        got = built.run(feeds)
        for k, c in enumerate(cases):
            if n_set >= len(c.data):
                continue
            problems = [f"{name}: {why}" for name, want in c.data[n_set][1].items()
                        if (why := compare(np.asarray(got[f"c{k}_{name}"]), want, c.rtol, c.atol))]
            status = "wrong" if problems else "pass"
            outcomes.append(Outcome(c.name, c.op_type, status, "; ".join(problems)[:300]))
    seconds = (time.perf_counter() - t0) / len(cases)
    for o in outcomes:
        o.seconds = seconds
    return outcomes


def groups(cases: list[Case]) -> list[Group]:
    """Cases by (op type, opset), in op order."""
    by: dict[tuple[str, int], Group] = {}
    for c in cases:
        by.setdefault((c.op_type, c.opset), Group(c.op_type, c.opset)).cases.append(c)
    return [by[k] for k in sorted(by)]


def run_cases(cases: list[Case], workdir: Path) -> list[Outcome]:
    """Every case: refused ones by the support check alone, the accepted ones built per group and run."""
    outcomes = []
    for group in groups(cases):
        accepted = []
        for c in group.cases:
            why = refusal(c.model)
            if why is None:
                accepted.append(c)
            else:
                outcomes.append(Outcome(c.name, c.op_type, "refused", why))
        sub = workdir / group.key
        sub.mkdir(parents=True, exist_ok=True)
        outcomes += run_group(accepted, sub)
    return outcomes


def check_against_list(outcomes: list[Outcome], known: dict[str, str]) -> list[str]:
    """Problems with respect to the known list: an unlisted case that fails, a listed case that passes."""
    problems = []
    for o in outcomes:
        if o.case in known and o.status == "pass":
            problems.append(f"{o.case} passes now: remove it from {LIST_FILE.name}")
        elif o.case not in known and o.status != "pass":
            problems.append(f"{o.case} {o.status}: {o.detail}")
    return problems


def main(argv: list[str]) -> int:
    """Print each case's outcome (and a summary), optionally for some op types only."""
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", help="comma-separated op types (default: the list file's)")
    ap.add_argument("--json", action="store_true", help="outcomes as JSON")
    ap.add_argument("--unlisted", action="store_true", help="print only what disagrees with the known list")
    args = ap.parse_args(argv)
    selection = load_selection()
    if args.ops:
        selection = Selection(tuple(args.ops.split(",")), selection.constant_inputs, selection.known,
                              selection.fold_only, selection.as_float32)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="onnx-conformance-") as tmp:
        outcomes = run_cases(collect(selection), Path(tmp))
    took = time.perf_counter() - t0
    if args.json:
        print(json.dumps([o.__dict__ for o in outcomes], indent=1))
    elif args.unlisted:
        print("\n".join(check_against_list(outcomes, selection.known)))
    else:
        for o in outcomes:
            print(f"{o.status:8} {o.case:60} {o.detail}")
    counts = {s: sum(o.status == s for o in outcomes) for s in ("pass", "wrong", "refused", "error")}
    print(f"{len(outcomes)} cases: " + ", ".join(f"{v} {k}" for k, v in counts.items()) + f" in {took:.1f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
