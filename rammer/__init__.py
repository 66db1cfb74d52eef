"""rammer: the model driver. `rammer.load(OUT_DIR)(**inputs)` runs a build; `rammer.build_model` makes one.

Modules: build (the build driver), runtime (the build folder, load, executors), check (onnxruntime truth),
plan (plan only), bench (+ torch_baseline), zoo (benchmark models), cli (the `rammer` command)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .runtime import Built


def load(out_dir: str) -> "Built":
    """Load a model built by `rammer build` as a callable: `load(dir)(**inputs) -> dict of outputs`."""
    from .runtime import load as _load
    return _load(out_dir)


def build_model(*args, **kwargs):
    """`rammer build` as a function (see rammer.build.build_model)."""
    from .build import build_model as _build
    return _build(*args, **kwargs)


__all__ = ["build_model", "load"]
