"""The truth every run is checked against: onnxruntime on the CPU, and the error measure the checks use."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx

RTOL = 1e-4  # `rammer run --check`: max |out - ref| relative to max |ref|, per output


def reference_outputs(model: onnx.ModelProto | str | Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime on the CPU, in the model's output order: the truth every variant is checked against."""
    import onnxruntime as ort  # imported here: only the checks need it
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    sess = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    return [np.asarray(o, dtype=np.float64) for o in sess.run(None, feeds)]


def relative_error(outs: list[np.ndarray], refs: list[np.ndarray]) -> float:
    """Largest deviation from the reference over all outputs, scaled by each reference's magnitude."""
    if len(outs) != len(refs):
        raise ValueError(f"{len(outs)} outputs, the reference has {len(refs)}")
    worst = 0.0
    for out, ref in zip(outs, refs):
        out = np.asarray(out, dtype=np.float64)
        if out.shape != ref.shape:
            raise ValueError(f"output shape {out.shape}, the reference has {ref.shape}")
        scale = max(float(np.max(np.abs(ref))), 1e-6) if ref.size else 1.0
        err = float(np.max(np.abs(out - ref))) / scale if ref.size else 0.0
        worst = max(worst, err if math.isfinite(err) else math.inf)
    return worst
