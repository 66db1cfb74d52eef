"""Run CUDA sources on a real GPU through CuPy, with the same API as cuda_emu.CpuModule.

Public API:
    gpu_available() -> (bool, reason)          # for pytest skips and the CLI ("no GPU: <reason>", exit 2)
    runtime_options(arch, include_dirs)        # the NVRTC options of every module the runtime loads
    GpuModule(source, kernels, include_dirs)   # NVRTC build (vdevice.nvrtc) for sm_XX of device 0, loaded by CuPy
    GpuModule.get_function(kernel_expr)        # a cupy RawKernel (attributes, .kernel for the driver Function)
    GpuModule.launch(kernel_expr, grid, block, dyn_smem, args, cooperative=False)
        args: numpy arrays (copied to the device, launched as pointers, copied back in place) and numpy scalars
        (passed by value with their dtype).
One compiler for the build's decisions and the launch (issue 28): the module is compiled by vdevice.nvrtc with
runtime_options, the same call with the same options the build's vEU sizing makes (vdevice.occupancy.nvrtc_usage),
and CuPy only loads the CUBIN. Where libnvrtc cannot be loaded by ctypes, CuPy's own NVRTC compiles it (RawModule,
which adds options of its own: -ftz=true, --device-as-default-execution-space, its include folders) and says so.
CuPy is imported lazily, so importing this module never needs a GPU.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
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


def runtime_options(arch: str, include_dirs: Sequence[str] = ()) -> list[str]:
    """The NVRTC options of every module the GPU runtime loads (arch: "sm_90"): toolchain's one NVRTC command line
    (include_dirs, the host stubs, the toolkit's headers first of any CUDA folder). The build's vEU sizing compiles
    with exactly these (vdevice.occupancy.nvrtc_usage)."""
    return nvrtc_options(arch, include_dirs)


def compile_module(source: str, kernels: Sequence[str], include_dirs: Sequence[str], arch: str) -> tuple[Path, dict]:
    """NVRTC-compile `source` with runtime_options into the toolchain cache: (CUBIN path, expression -> lowered
    name). Cached by the source, the options and NVRTC's version (a big interpreter takes tens of seconds)."""
    from toolchain.cache import cache_dir, content_key

    from . import nvrtc

    options = runtime_options(arch, include_dirs)
    key = content_key(source, "\0".join(options), "\0".join(kernels), repr(nvrtc.version()))
    folder = cache_dir("nvrtc")
    cubin, names = folder / f"{key}.cubin", folder / f"{key}.json"
    if cubin.is_file() and names.is_file():
        return cubin, json.loads(names.read_text())
    out = nvrtc.compile_cubin(source, options, list(kernels))
    folder.mkdir(parents=True, exist_ok=True)
    for path, data in ((cubin, out.cubin), (names, json.dumps(out.lowered).encode())):
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return cubin, out.lowered


class GpuModule:
    """One NVRTC-compiled source; launches copy numpy buffers to the device and back."""

    def __init__(self, source: str, kernels: Sequence[str], include_dirs: Sequence[str] = ()):
        from . import nvrtc

        cp = _cupy()
        self._cp = cp
        self.arch = f"sm_{cp.cuda.Device(0).compute_capability}"  # e.g. sm_90
        self.kernels = list(kernels)
        ok, why = nvrtc.available()
        self.compiler = why if ok else "CuPy's NVRTC"
        if ok:
            path, self.lowered = compile_module(source, self.kernels, include_dirs, self.arch)
            self.module = cp.RawModule(path=str(path))
        else:  # the same options, but CuPy adds its own (module docstring): figures may differ from the build's
            print(f"note: {why}; CuPy's NVRTC compiles the module (its registers may differ from the build's)",
                  file=sys.stderr)
            self.lowered = {}
            options = runtime_options(self.arch, include_dirs)
            cuda_inc = os.path.join(cp.cuda.get_cuda_path() or "", "include")
            if os.path.isdir(cuda_inc):  # after the toolkit's (a runtime wheel's lacks crt/: first, it broke builds)
                options.append(f"-I{cuda_inc}")
            self.module = cp.RawModule(code=source, options=tuple(options), name_expressions=self.kernels)

    def get_function(self, kernel_expr: str) -> Any:
        """The loaded kernel of a name expression (a cupy RawKernel)."""
        return self.module.get_function(self.lowered.get(kernel_expr, kernel_expr))

    def launch(self, kernel_expr: str, grid: Sequence[int], block: Sequence[int], dyn_smem: int,
               args: Sequence[Any], cooperative: bool = False) -> None:
        """Run one kernel to completion; array arguments are updated in place."""
        cp = self._cp
        fn = self.get_function(kernel_expr)
        if dyn_smem > 48 * 1024:
            fn.max_dynamic_shared_size_bytes = dyn_smem
        device_args = [cp.asarray(np.asarray(a, order="C")) if isinstance(a, np.ndarray) else a for a in args]
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
