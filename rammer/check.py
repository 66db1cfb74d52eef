"""The truth every run is checked against: onnxruntime on the CPU, and the error measure the checks use."""
from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

# `rammer bench` and rammer.kernel_rates: a timed variant's (or node's) outputs against the reference's, max |out - ref|
# relative to max |ref| (fp32 kernels with other summation orders; the library's convolution algorithms)
VARIANT_RTOL = 2e-3
RTOL = 1e-4  # `rammer run --check`: every element within ATOL + RTOL * |ref| of onnxruntime's (numpy's allclose)
ATOL = 1e-5  # the zoo's own numpy checks hold every --small model to these two (tests/test_zoo.py), and they pass
# every zoo --small model and ONNX conformance case here; an element off by more (a sign flipped beside large
# values, a NaN turned into 0) fails on its own, whatever the output's largest value


def reference_outputs(model: onnx.ModelProto | str | Path, feeds: dict[str, np.ndarray],
                      base_dir: str | Path | None = None) -> list[np.ndarray]:
    """onnxruntime on the CPU, in the model's output order: the truth every variant is checked against. A file's
    external data is found beside it; an in-memory model that still names external files reads them from
    `base_dir` (its file's folder)."""
    sess = reference_session(model, base_dir)
    return [np.asarray(o, dtype=np.float64) for o in sess.run(None, feeds)]


def reference_session(model: onnx.ModelProto | str | Path, base_dir: str | Path | None = None) -> Any:
    """An onnxruntime CPU session of a file (by path, so onnxruntime resolves external data against the model's
    own folder) or of an in-memory model (as bytes; through a temporary folder when it is over protobuf's 2 GiB
    or names external files)."""
    import onnxruntime as ort  # imported here: only the checks need it
    from scheduler.onnx_files import PROTOBUF_LIMIT, load_weights_into, uses_external_data
    providers = ["CPUExecutionProvider"]
    if not isinstance(model, onnx.ModelProto):
        return ort.InferenceSession(str(model), providers=providers)
    external = uses_external_data(model)
    if not external and model.ByteSize() < PROTOBUF_LIMIT:
        return ort.InferenceSession(model.SerializeToString(), providers=providers)
    if external and base_dir is None:
        raise ValueError("the model keeps its weights in external data files: pass its folder (base_dir) or its path")
    with tempfile.TemporaryDirectory(prefix="rammer-ort-") as tmp:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)  # saving with external data rewrites the tensors: keep the caller's model as it is
        if external:
            load_weights_into(copy, str(base_dir))
        path = Path(tmp) / "model.onnx"
        onnx.save_model(copy, str(path), save_as_external_data=True, location="model.onnx.data")
        return ort.InferenceSession(str(path), providers=providers)  # the data is read now: the folder may go


def relative_error(outs: list[np.ndarray], refs: list[np.ndarray]) -> float:
    """Largest deviation from the reference over all outputs, scaled by each reference's largest finite magnitude.

    NaN where the reference has NaN, and the same infinity where the reference has it, agree (as onnxruntime's
    own tests compare); any other non-finite disagreement is an infinite error (see nonfinite_mismatch)."""
    if len(outs) != len(refs):
        raise ValueError(f"{len(outs)} outputs, the reference has {len(refs)}")
    worst = 0.0
    for out, ref in zip(outs, refs):
        out, ref = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
        if out.shape != ref.shape:
            raise ValueError(f"output shape {out.shape}, the reference has {ref.shape}")
        if not ref.size:
            continue
        same = (np.isnan(out) & np.isnan(ref)) | (np.isinf(ref) & (out == ref))
        finite_ref = np.abs(ref[np.isfinite(ref)])
        scale = max(float(finite_ref.max()) if finite_ref.size else 0.0, 1e-6)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where(same, 0.0, np.abs(out - ref))
        err = float(np.max(np.where(np.isnan(diff), np.inf, diff))) / scale
        worst = max(worst, err)
    return worst


def nonfinite_mismatch(out: np.ndarray, ref: np.ndarray) -> str | None:
    """A one-line description of the first place where out and ref disagree about NaN or infinity, None if
    they agree everywhere (so a FAIL says "NaN where onnxruntime has 0.5" rather than "error inf")."""
    out, ref = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    bad = (np.isnan(out) != np.isnan(ref)) | ((np.isinf(out) | np.isinf(ref)) & (out != ref) & ~np.isnan(ref))
    if out.shape != ref.shape or not bad.any():
        return None
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    name = lambda v: "NaN" if math.isnan(v) else ("+inf" if v == math.inf else "-inf" if v == -math.inf else f"{v:.6g}")
    return (f"{name(out[where])} where onnxruntime has {name(ref[where])} at index {list(where)} "
            f"({int(bad.sum())} such element(s))")


@dataclass
class ElementCheck:
    """How one output compares with onnxruntime's, element by element (|out - ref| <= atol + rtol * |ref|)."""
    name: str
    ok: bool
    ratio: float                   # worst |out - ref| / (atol + rtol * |ref|): at most 1 passes
    index: tuple[int, ...] | None  # the worst element
    got: float = 0.0
    want: float = 0.0
    bad: int = 0                   # elements outside the bound
    nonfinite: str | None = None   # a NaN/Inf disagreement, described

    def line(self, rtol: float = RTOL, atol: float = ATOL) -> str:
        """`y: ok (worst y[2, 5] ...)` or `y: FAIL ...`, naming the worst element."""
        if self.index is None:
            return f"{self.name}: ok (empty)"
        where = f"{self.name}[{', '.join(map(str, self.index))}]"
        head = "ok" if self.ok else f"FAIL: {self.bad} element(s) outside |out - ref| <= {atol:g} + {rtol:g}*|ref|;"
        detail = self.nonfinite or (f"worst {where}: {self.got:.7g} vs onnxruntime {self.want:.7g} (|diff| "
                                    f"{abs(self.got - self.want):.3g}, {self.ratio:.3g}x the tolerance)")
        return f"{self.name}: {head} {detail}"


def check_output(name: str, out: np.ndarray, ref: np.ndarray, rtol: float = RTOL, atol: float = ATOL) -> ElementCheck:
    """numpy's allclose per element, with NaN where onnxruntime has NaN and the same infinity agreeing; the worst
    element (largest share of its own tolerance) named."""
    out, ref = np.asarray(out, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"output {name} has shape {list(out.shape)}, the reference {list(ref.shape)}")
    if not ref.size:
        return ElementCheck(name, True, 0.0, None)
    same = (np.isnan(out) & np.isnan(ref)) | (np.isinf(ref) & (out == ref))
    with np.errstate(invalid="ignore", over="ignore"):
        ratio = np.where(same, 0.0, np.abs(out - ref) / (atol + rtol * np.abs(ref)))
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    flat = int(np.argmax(ratio))
    index = tuple(int(i) for i in np.unravel_index(flat, ref.shape))
    worst = float(ratio.reshape(-1)[flat])
    bad = int((ratio > 1.0).sum())
    return ElementCheck(name, bad == 0, worst, index, float(out[index]), float(ref[index]), bad,
                        nonfinite_mismatch(out, ref))
