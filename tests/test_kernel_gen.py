"""Random valid, race-free kernels (tests/kernel_gen.py) convert and verify: the legacy kernel and the persistent
rKernel agree bit for bit under the emulator's sanitizers. CI runs a fixed seed range; set RT_GEN_SEEDS=a:b for
more (e.g. RT_GEN_SEEDS=0:300)."""
from __future__ import annotations

import os

import pytest

from kernel_gen import generate
from rtransform.verify import verify_file


def _seeds() -> range:
    lo, _, hi = os.environ.get("RT_GEN_SEEDS", "0:6").partition(":")
    return range(int(lo), int(hi))


@pytest.mark.parametrize("seed", _seeds())
def test_generated_kernel_verifies(tmp_path, seed):
    src, spec = generate(seed)
    (tmp_path / "gen.cu").write_text(src)
    (tmp_path / "gen.spec.yaml").write_text(spec)
    result = verify_file(str(tmp_path / "gen.cu"), str(tmp_path / "gen.spec.yaml"))
    assert result.ok, f"seed {seed}: {result.summary()}\n{src}"


def test_generator_is_deterministic_and_mixes_features():
    assert generate(3) == generate(3)
    text = "".join(generate(s)[0] for s in range(40))
    for feature in ("__syncthreads();", "__shfl_", "cg::reduce", "template <class G>", "[=]", "mutable", "[]",
                    "atomicAdd", "__device__ unsigned mix0(unsigned x);"):
        assert feature in text, feature
