"""Run CUDA sources on a real GPU through CuPy/NVRTC, with the same API as cuda_emu.CpuModule.

Public API:
    gpu_available() -> (bool, reason)          # for pytest skips and the CLI ("no GPU: <reason>", exit 2)
    GpuModule(source, kernels, include_dirs)   # NVRTC build, -std=c++17 --gpu-architecture=sm_XX of device 0
    GpuModule.launch(kernel_expr, grid, block, dyn_smem, args, cooperative=False)
        args: numpy arrays (copied to the device, launched as pointers, copied back in place) and numpy scalars
        (passed by value with their dtype).
CuPy is imported lazily, so importing this module never needs a GPU.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from toolchain.cache import cache_dir

# NVRTC has no host headers; legacy files include them for a few macros and typedefs. These stand-ins come
# first on the include path (CUDA's own headers such as cuda_fp16.h and cooperative_groups.h are not stubbed).
_FLOAT_H = ("#pragma once\n#define FLT_MAX 3.402823466e+38F\n#define FLT_MIN 1.175494351e-38F\n"
            "#define FLT_EPSILON 1.192092896e-07F\n#define DBL_MAX 1.7976931348623158e+308\n")
_MATH_H = ("#pragma once\n#ifndef INFINITY\n#define INFINITY __int_as_float(0x7f800000)\n#endif\n"
           "#ifndef NAN\n#define NAN __int_as_float(0x7fffffff)\n#endif\n")
_STDINT_H = ("#pragma once\ntypedef signed char int8_t; typedef short int16_t; typedef int int32_t; "
             "typedef long int64_t;\ntypedef unsigned char uint8_t; typedef unsigned short uint16_t; "
             "typedef unsigned int uint32_t; typedef unsigned long uint64_t;\n"
             "typedef long intptr_t; typedef unsigned long uintptr_t;\n")
_LIMITS_H = "#pragma once\n#define INT_MAX 2147483647\n#define INT_MIN (-INT_MAX - 1)\n#define UINT_MAX 4294967295U\n"
_EMPTY = "#pragma once\n"
NVRTC_STUBS = {
    "cuda_runtime.h": _EMPTY, "cuda_runtime_api.h": _EMPTY, "device_launch_parameters.h": _EMPTY,
    "stdio.h": _EMPTY, "cstdio": _EMPTY, "stdlib.h": _EMPTY, "cstdlib": _EMPTY, "assert.h": _EMPTY,
    "float.h": _FLOAT_H, "cfloat": _FLOAT_H, "math.h": _MATH_H, "cmath": _MATH_H,
    "stdint.h": _STDINT_H, "cstdint": _STDINT_H, "limits.h": _LIMITS_H, "climits": _LIMITS_H,
}


class NoGpuError(RuntimeError):
    """No usable GPU (no CuPy, no driver, no device); str() is 'no GPU: <reason>'."""


def _cupy() -> Any:
    """The cupy module with a visible device, or NoGpuError saying why not."""
    try:
        import cupy
    except Exception as e:  # ImportError, or a CuPy built for another CUDA failing at import
        raise NoGpuError(f"no GPU: CuPy is not importable ({type(e).__name__}: {e})") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDARuntimeError when there is no driver
        raise NoGpuError(f"no GPU: CUDA runtime unavailable ({e})") from None
    if count < 1:
        raise NoGpuError("no GPU: no CUDA device visible")
    return cupy


def gpu_available() -> tuple[bool, str]:
    """(True, device name) when CuPy can use a GPU, else (False, reason)."""
    try:
        cp = _cupy()
        props = cp.cuda.runtime.getDeviceProperties(0)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        return True, name
    except NoGpuError as e:
        return False, str(e)


class GpuModule:
    """One NVRTC-compiled source; launches copy numpy buffers to the device and back."""

    def __init__(self, source: str, kernels: Sequence[str], include_dirs: Sequence[str] = ()):
        cp = _cupy()
        self._cp = cp
        cc = cp.cuda.Device(0).compute_capability  # e.g. "90"
        options = ["-std=c++17", f"--gpu-architecture=sm_{cc}"]
        options += [f"-I{os.path.abspath(d)}" for d in include_dirs] + [f"-I{stub_dir()}"]
        cuda_inc = os.path.join(cp.cuda.get_cuda_path() or "", "include")
        if os.path.isdir(cuda_inc):
            options.append(f"-I{cuda_inc}")
        self.kernels = list(kernels)
        self.module = cp.RawModule(code=source, options=tuple(options), name_expressions=self.kernels)

    def launch(self, kernel_expr: str, grid: Sequence[int], block: Sequence[int], dyn_smem: int,
               args: Sequence[Any], cooperative: bool = False) -> None:
        """Run one kernel to completion; array arguments are updated in place."""
        cp = self._cp
        fn = self.module.get_function(kernel_expr)
        if dyn_smem > 48 * 1024:
            fn.max_dynamic_shared_size_bytes = dyn_smem
        device_args = [cp.asarray(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a for a in args]
        # RawKernel.__call__ fixes enable_cooperative_groups itself: launch through its driver Function
        fn.kernel(tuple(_dim3(grid)), tuple(_dim3(block)), tuple(device_args), shared_mem=dyn_smem,
                  enable_cooperative_groups=cooperative)
        cp.cuda.runtime.deviceSynchronize()
        for host, dev in zip(args, device_args):
            if isinstance(host, np.ndarray):
                np.copyto(host, cp.asnumpy(dev).reshape(host.shape))


def stub_dir() -> Path:
    """A folder holding NVRTC_STUBS (written once, in the toolchain's cache root)."""
    root = cache_dir("nvrtc_stubs")
    root.mkdir(parents=True, exist_ok=True)
    for name, text in NVRTC_STUBS.items():
        path = root / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return root


def _dim3(v: Sequence[int]) -> tuple[int, int, int]:
    t = tuple(int(x) for x in v) + (1, 1, 1)
    return t[0], t[1], t[2]
