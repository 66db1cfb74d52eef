"""rtransform: the kernel tools — convert legacy CUDA kernels into rKernels, run and verify them (public API).
Models are rammer's: `import rammer; rammer.load(OUT_DIR)`."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from converter import ConversionError, ConversionResult, convert_file, convert_source


def __getattr__(name: str) -> Any:
    """The converter (libclang) loads on first use, so that `rtransform --version` and `--help` stay fast."""
    if name in __all__:
        import converter
        return getattr(converter, name)
    raise AttributeError(f"module 'rtransform' has no attribute {name!r}")


__all__ = ["ConversionError", "ConversionResult", "convert_file", "convert_source"]
