"""rtransform: the kernel tools — convert legacy CUDA kernels into rKernels, run and verify them (public API).
Models are rammer's: `import rammer; rammer.load(OUT_DIR)`."""
from converter import ConversionError, ConversionResult, convert_file, convert_source

__all__ = ["ConversionError", "ConversionResult", "convert_file", "convert_source"]
