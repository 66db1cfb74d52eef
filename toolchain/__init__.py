"""The bottom layer: facts about the tools on this machine (the CUDA toolkit and its compiler command lines,
ptxas, SASS, the C++ demangler and splitter, the cache root) and the typed refusal, which every other package asks
for in one place. Imports nothing of the project."""
from .cache import cache_root, content_key
from .cxx import split_top_level, template_arg_text, template_args_text
from .demangle import demangle_entry
from .nvcc import Toolkit, find_nvcc, find_toolkit, nvcc_command, nvcc_compile, nvrtc_options
from .ptxas import parse_ptxas, run_ptxas
from .refusal import Refusal, Refused


def package_version() -> str:
    """The installed distribution's version (both CLIs print it with --version)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("rammer-rtask")
    except PackageNotFoundError:
        return "unknown (not installed)"


__all__ = ["package_version", "cache_root", "content_key", "demangle_entry", "Toolkit", "find_toolkit", "find_nvcc",
           "nvcc_command", "nvcc_compile", "nvrtc_options", "parse_ptxas", "run_ptxas", "Refusal", "Refused",
           "split_top_level", "template_arg_text", "template_args_text"]
