"""Where the shared stub headers live (toolchain/include/stubs/README.md says which consumer sees what)."""
from __future__ import annotations

from pathlib import Path

STUB_ROOT = Path(__file__).resolve().parent / "include" / "stubs"
HOST_STUBS = STUB_ROOT / "host"      # C/C++ library and CUDA host-runtime headers: parser, emulator and NVRTC
DEVICE_STUBS = STUB_ROOT / "device"  # CUDA device headers NVRTC and nvcc bring themselves: parser and emulator
CLANG_BUILTINS = STUB_ROOT / "clang"  # the compiler's own headers the libclang wheel lacks: the parser only
PARSE_DEFINE = "RT_PARSE"            # the macro the parser defines (the emulator's is RT_CPU_EMULATOR)


# vendor library headers whose stubs only serve host code: the device slice drops their #include when the device
# code it keeps names nothing they declare
VENDOR_HEADERS = frozenset({"cublas_v2.h", "cublas.h", "cublas_api.h", "cublasLt.h", "cudnn.h", "curand.h", "cufft.h",
                            "nccl.h", "nvToolsExt.h", "nvtx3/nvToolsExt.h", "helper_cuda.h", "helper_functions.h",
                            "helper_string.h", "helper_timer.h"})


def stub_dirs(device: bool = True) -> list[Path]:
    """The stub folders for a consumer: both, or (NVRTC) the host ones only."""
    return [HOST_STUBS, DEVICE_STUBS] if device else [HOST_STUBS]


def has_stub(name: str) -> bool:
    """Whether `#include <name>` resolves to one of the stubs."""
    return any((d / name).is_file() for d in stub_dirs())
