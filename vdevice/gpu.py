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
from typing import Any, Sequence

import numpy as np

from toolchain.nvcc import nvrtc_options

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
        # include_dirs, the host stubs, the toolkit's headers, and only then CuPy's folder (a runtime wheel's lacks
        # crt/: taken first, it broke every GPU build on the H100)
        options = nvrtc_options(f"sm_{cc}", include_dirs)
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


def _dim3(v: Sequence[int]) -> tuple[int, int, int]:
    t = tuple(int(x) for x in v) + (1, 1, 1)
    return t[0], t[1], t[2]
