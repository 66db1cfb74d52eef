"""rtransform: convert legacy CUDA kernels into rKernels, verify them, and build models (public API)."""
from converter import ConversionError, ConversionResult, convert_file, convert_source


def load(out_dir: str):
    """Load a model built by `rammer build` as a callable: `load(dir)(**inputs) -> dict of outputs`."""
    from scheduler.build import load as _load
    return _load(out_dir)


__all__ = ["ConversionError", "ConversionResult", "convert_file", "convert_source", "load"]
