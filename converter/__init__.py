"""Legacy CUDA kernels → rKernels (libclang analysis, source-range rewriting)."""
from .convert import CONVERTER_VERSION, ConversionError, ConversionResult, convert_file, convert_source
from .output import RKernelMeta, metadata_json, metadata_path, write_atomic  # noqa: F401  (public API)
from .parse import parse_cuda

__all__ = ["CONVERTER_VERSION", "ConversionError", "ConversionResult", "convert_file", "convert_source", "parse_cuda",
           "write_atomic"]
