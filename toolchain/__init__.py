"""The bottom layer: facts about the tools on this machine (nvcc/ptxas, the C++ demangler, the cache root) that
every other package asks for in one place. Imports nothing of the project."""
from .cache import cache_root, content_key
from .cxx import template_arg_text, template_args_text
from .demangle import demangle_entry
from .nvcc import find_nvcc, nvcc_compile
from .ptxas import parse_ptxas, run_ptxas


def package_version() -> str:
    """The installed distribution's version (both CLIs print it with --version)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("rammer-rtask")
    except PackageNotFoundError:
        return "unknown (not installed)"


__all__ = ["package_version", "cache_root", "content_key", "demangle_entry", "find_nvcc", "nvcc_compile", "parse_ptxas",
           "run_ptxas",
           "template_arg_text", "template_args_text"]
