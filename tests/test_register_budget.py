"""The register budget of a GPU build (rammer.budget): which vEU count a few register-hungry instantiations cost,
which candidates a plan at a higher count leaves out, and the build keeping the plan the cost model prefers, with
the choice in build.json."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import onnx
import pytest
from test_scheduler import cnn_model

from rammer.budget import BudgetChoice, BudgetTarget, budget_target, without_candidates
from vdevice.occupancy import register_budget


def _file_budget(threads: int, k: int) -> int:
    """Registers per thread when k blocks of `threads` threads share the SM: its 64 K registers are 4 sub-partition
    files of 16 K, each holding a quarter of the warps (rounded up), in steps of 8 registers per thread (256 per
    warp); the CUDA occupancy calculator's arithmetic, written out."""
    warps_per_partition = -(-k * -(-threads // 32) // 4)
    return 16384 // (warps_per_partition * 32) // 8 * 8


@pytest.mark.parametrize("threads,k", [(256, 1), (256, 2), (256, 3), (256, 4), (128, 3), (512, 2), (96, 5)])
def test_register_budget_is_the_register_file_shared_by_k_veus(threads: int, k: int) -> None:
    assert register_budget(threads, 4096, k) == min(255, _file_budget(threads, k))


def test_register_budget_is_zero_when_shared_memory_rules_k_out() -> None:
    assert register_budget(256, 120 * 1024, 2) == 0


@pytest.mark.parametrize("registers,k_all,want_k,want_fat", [
    ({"fat<1>": 242, "thin<2>": 72, "mid<3>": 100}, 1, 3, ("fat<1>", "mid<3>")),  # the highest count first
    ({"fat<1>": 242, "thin<2>": 72}, 1, 3, ("fat<1>",)),                 # 72 fits 80 (3 x 256 threads)
    ({"a<1>": 200, "b<2>": 210}, 1, None, ()),                           # every one is over: nothing to gain
    ({"a<1>": 60, "b<2>": 64}, 3, 4, ()),                                # 64 fits 4/SM: not a register problem
])
def test_budget_target_drops_only_what_a_higher_count_cannot_hold(registers, k_all, want_k, want_fat) -> None:
    """The highest count above k_all at which some but not all instantiations are over budget."""
    got = budget_target(registers, 256, 4096, k_all, most=4)
    if want_k is None or not want_fat:
        assert got is None
        return
    assert got is not None and got.veus_per_sm == want_k and got.excluded == want_fat
    assert got.registers == _file_budget(256, want_k)
    assert all(registers[e] > got.registers for e in got.excluded)
    assert all(r <= got.registers for e, r in registers.items() if e not in got.excluded)


def _cand(variant: str, *exprs: tuple[str, list]) -> SimpleNamespace:
    return SimpleNamespace(variant=variant, launches=[SimpleNamespace(kernel=k, template_args=t) for k, t in exprs])


def test_without_candidates_lists_the_dropped_ones_and_refuses_an_empty_node() -> None:
    from scheduler.workload import OpSpec, Workload
    wl = Workload([OpSpec(0, "mm", "MatMul", [_cand("tc128x64", ("gemm_tc", [128, 64, 0])),
                                            _cand("tiled", ("gemm_tiled", [16]))]),
                   OpSpec(1, "conv", "Conv", [_cand("tc", ("conv_tc_offsets", [256]), ("conv_tc", [128, 64, 0])),
                                              _cand("igemm", ("conv_implicit_gemm", [16, 1]))]),
                   OpSpec(2, "relu", "Relu", [_cand("plain", ("unary", [1]))])])
    got = without_candidates(wl, ("conv_tc<128, 64, 0>", "gemm_tc<128, 64, 0>"))
    assert got is not None
    reduced, dropped = got
    assert dropped == ["mm: tc128x64", "conv: tc"]
    assert [[c.variant for c in s.candidates] for s in reduced.ops] == [["tiled"], ["igemm"], ["plain"]]
    assert [len(s.candidates) for s in wl.ops] == [2, 2, 1]  # the original is untouched
    assert without_candidates(wl, ("unary<1>",)) is None


@pytest.mark.parametrize("k_budget,us_budget,chosen", [(3, 90.0, "budget"), (3, 110.0, "all"), (1, 50.0, "all"),
                                                       (0, 0.0, "all")])
def test_budget_choice_keeps_the_faster_plan_that_reaches_more_veus(k_budget, us_budget, chosen) -> None:
    c = BudgetChoice(1, 100.0, BudgetTarget(3, 80, ("fat<1>",)), k_budget, us_budget, ["n: fat"])
    assert c.decide() == chosen
    record = c.to_json()
    assert record["chosen"] == chosen and record["excluded_instantiations"] == ["fat<1>"] and record["why"]


@pytest.mark.nvcc
@pytest.mark.parametrize("fat,chosen", [("conv_tc<128, 64, 0>", "budget"), ("conv_tc", "all")])
def test_gpu_build_with_a_fat_kernel_plans_within_the_budget(tmp_path: Path, monkeypatch, fat: str,
                                                              chosen: str) -> None:
    """Fake fat kernels: the tensor-core convolutions matching `fat` 'need' 240 registers (every other instantiation
    72), so with them the interpreter holds one 256-thread vEU per SM (as ResNeXt's did with tc128x64 before tc.cu
    fitted 128 registers). The build plans without them at 3/SM, lists the dropped candidates, records both
    predictions and keeps the faster: without the 128x64 tile the 64x64 one does nearly as well at three times the
    vEUs, so the budget plan wins; without any tensor-core convolution the fp32 ones lose (cost model, 8x64x32x32
    CNN)."""
    import rammer.build as rb
    import vdevice.occupancy as occ
    from toolchain.cxx import kernel_expr
    from toolchain.nvcc import find_nvcc
    if find_nvcc() is None:
        pytest.skip("needs nvcc: a --target gpu build compiles its program")

    def is_fat(kernel) -> bool:
        expr = kernel_expr(kernel.wrapper_name, kernel.template_args)
        return expr == fat if "<" in fat else kernel.wrapper_name == fat

    def fake_registers(ops, texts, *a, **k):
        return {kernel_expr(op.kernel.wrapper_name, op.kernel.template_args): 240 if is_fat(op.kernel) else 72
                for op in ops}

    def fake_occupancy(ops, texts, plan, most):
        regs = max(fake_registers(ops, texts).values())
        threads, smem = rb.veu_footprint(plan)
        usage = occ.Usage(regs, 0, 0)
        fits = occ.blocks_per_sm(threads, regs, smem)
        k = max(1, min(most, fits.blocks))
        return occ.Choice(k, usage, fits, ((k, usage, fits),))

    monkeypatch.setattr(occ, "instantiation_registers", fake_registers)
    monkeypatch.setattr(rb, "choose_occupancy", fake_occupancy)
    path = tmp_path / "m.onnx"
    onnx.save(cnn_model(batch=8, channels=64, size=32, groups=4), path)
    built = rb.build_model(path, tmp_path / "out", target="gpu", quiet=True, profile="model")
    manifest = json.loads((tmp_path / "out" / "build.json").read_text())
    record = manifest["stats"]["register_budget"]
    assert record is not None, "the fat kernel kept 1 vEU/SM and the budget did not look"
    assert record["veus_per_sm_all"] == 1 and record["veus_per_sm_budget"] == 3 and record["registers_budget"] == 80
    assert record["excluded_instantiations"] and all(e.startswith("conv_tc<") for e in record["excluded_instantiations"])
    assert record["excluded_candidates"] and all(": tc" in c for c in record["excluded_candidates"])
    assert record["chosen"] == chosen
    assert (record["predicted_budget_us"] < record["predicted_all_us"]) == (chosen == "budget")
    k = 3 if chosen == "budget" else 1
    assert manifest["stats"]["veus_per_sm"] == k and manifest["num_veus"] == 132 * k
    assert any(is_fat(op.kernel) for op in built.ops) == (chosen == "all")
    assert "register budget" in (tmp_path / "out" / "report.md").read_text()
