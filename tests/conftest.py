"""Fixtures shared by the test files (keep small; add, never remove)."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root, so tests never depend on the working directory."""
    return REPO


@pytest.fixture(scope="session")
def nvcc_path() -> str:
    """A working nvcc, or a visible skip saying why there is none."""
    from toolchain.nvcc import find_nvcc
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found: install a CUDA toolkit or the nvidia-cuda-nvcc wheel (or set $NVCC)")
    return nvcc
