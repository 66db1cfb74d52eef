"""The register budget of a GPU build (scheduler.search): which vEU count a few register-hungry instantiations cost,
which candidates a plan at a higher count leaves out, and the build keeping the plan the cost model prefers, with
the choice in build.json."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import onnx
import pytest
from test_scheduler import cnn_model

from scheduler.search import (BudgetChoice, BudgetTarget, BudgetTrial, budget_targets, over_budget,
                           without_candidates)
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


@pytest.mark.parametrize("registers,k_all,want", [
    # 2/SM: 128 registers, only fat is over; 3/SM: 80, mid too (fat, the hungriest, goes first); 4/SM: 64, all over
    ({"fat<1>": 242, "thin<2>": 72, "mid<3>": 100}, 1, [(2, ("fat<1>",), 1), (3, ("fat<1>",), 2)]),
    ({"fat<1>": 242, "thin<2>": 60}, 2, [(3, ("fat<1>",), 1), (4, ("fat<1>",), 1)]),
    ({"a<1>": 200, "b<2>": 210}, 1, []),                           # every one is over: nothing to gain
    ({"a<1>": 60, "b<2>": 64}, 3, []),                             # 64 fits 4/SM: not a register problem
    ({"a<1>": 120, "b<2>": 150}, 1, [(2, ("b<2>",), 1)]),          # 3/SM would leave nothing
])
def test_budget_targets_leave_out_the_hungriest_first(registers, k_all, want) -> None:
    """Each count above k_all at which some but not all instantiations are over its register budget, starting
    without the hungriest of them."""
    got = budget_targets(registers, 256, 4096, k_all, most=4)
    assert [(t.veus_per_sm, t.excluded) for t in got] == [(k, ex) for k, ex, _ in want]
    for t, (_, _, n_over) in zip(got, want):
        assert t.registers == _file_budget(256, t.veus_per_sm)
        over = over_budget(registers, t.registers)
        assert len(over) == n_over and over[0] == t.excluded[0]
        assert [registers[e] for e in over] == sorted((r for r in registers.values() if r > t.registers), reverse=True)


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
    assert dropped == {"tc128x64": 1, "tc": 1}
    assert [[c.variant for c in s.candidates] for s in reduced.ops] == [["tiled"], ["igemm"], ["plain"]]
    assert [len(s.candidates) for s in wl.ops] == [2, 2, 1]  # the original is untouched
    assert without_candidates(wl, ("unary<1>",)) is None


@pytest.mark.parametrize("trials,chosen", [
    ([(2, 90.0)], 0), ([(2, 110.0)], -1), ([(1, 50.0)], -1), ([(0, 0.0)], -1),
    ([(2, 90.0), (3, 80.0)], 1), ([(2, 80.0), (3, 85.0)], 0), ([(0, 0.0), (3, 97.0)], 1),
    ([(2, 99.0)], -1)])  # 1% faster: within the cost model's margin (MIN_GAIN), not worth a kernel
def test_budget_choice_keeps_the_fastest_plan_that_reaches_more_veus(trials, chosen: int) -> None:
    """Against 1 vEU/SM predicted at 100 us: the fastest trial that reaches more vEUs and beats it by more than 2%,
    else none."""
    c = BudgetChoice(1, 100.0, [BudgetTrial(BudgetTarget(k + 1, 80, ("fat<1>",)), k, us, {"fat": 1} if k else {})
                                for k, us in trials])
    assert c.decide() == chosen
    record = c.to_json()
    assert record["chosen"] == ("all" if chosen < 0 else "budget") and len(record["trials"]) == len(trials)
    assert record["veus_per_sm"] == (1 if chosen < 0 else trials[chosen][0])
    assert record["excluded_candidates"] == ({} if chosen < 0 else {"fat": 1})


@pytest.mark.nvcc
@pytest.mark.parametrize("fat,chosen", [("conv_tc<128, 64, 0,", "budget"), ("conv_tc", "all")])
def test_gpu_build_with_a_fat_kernel_plans_within_the_budget(tmp_path: Path, monkeypatch, fat: str,
                                                              chosen: str) -> None:
    """Fake fat kernels: the tensor-core convolutions matching `fat` 'need' 240 registers (every other instantiation
    72), so with them the interpreter holds one 256-thread vEU per SM (as ResNeXt's did with tc128x64 before tc.cu
    fitted 128 registers). The build plans without them at 2/SM (then 3/SM while that pays), lists the dropped
    candidates, records every prediction and keeps the fastest: without the 128x64 tile the 64x64 one does nearly
    as well on more vEUs, so a budget plan wins; without any tensor-core convolution the fp32 ones lose (cost model,
    8x64x32x32 CNN)."""
    import rammer.build as rb
    import scheduler.search as search
    import vdevice.occupancy as occ
    from toolchain.cxx import kernel_expr
    from toolchain.nvcc import find_nvcc
    if find_nvcc() is None:
        pytest.skip("needs nvcc: a --target gpu build compiles its program")

    def is_fat(kernel) -> bool:  # `fat`: a kernel name, or the start of its instantiations' expressions
        expr = kernel_expr(kernel.wrapper_name, kernel.template_args)
        return expr.startswith(fat) if "<" in fat else kernel.wrapper_name == fat

    def fake_registers(ops, texts):
        return {kernel_expr(op.kernel.wrapper_name, op.kernel.template_args): 240 if is_fat(op.kernel) else 72
                for op in ops}

    def fake_occupancy(ops, texts, plan, most, floor=0):
        regs = max(fake_registers(ops, texts).values())
        threads, smem = search.veu_footprint(plan, ops, texts)
        usage = occ.Usage(regs, 0, 0)
        fits = occ.blocks_per_sm(threads, regs, smem)
        k = max(1, min(most, fits.blocks))
        return occ.Choice(k, usage, fits, ((k, usage, fits),))

    monkeypatch.setattr(search, "instantiation_registers", fake_registers)
    monkeypatch.setattr(search, "choose_occupancy", fake_occupancy)
    path = tmp_path / "m.onnx"
    onnx.save(cnn_model(batch=8, channels=64, size=32, groups=4), path)
    built = rb.build_model(path, tmp_path / "out", target="gpu", quiet=True, profile="model", launches=False)
    manifest = json.loads((tmp_path / "out" / "build.json").read_text())
    record = manifest["stats"]["register_budget"]
    assert record is not None, "the fat kernel kept 1 vEU/SM and the budget did not look"
    first = record["trials"][0]
    assert record["veus_per_sm_all"] == 1 and first["veus_per_sm_target"] == 2 and first["registers_budget"] == 128
    assert first["excluded_instantiations"] and all(e.startswith("conv_tc<") for e in first["excluded_instantiations"])
    assert first["excluded_candidates"] and all(v.startswith("tc") for v in first["excluded_candidates"])
    assert all(t["veus_per_sm"] == t["veus_per_sm_target"] for t in record["trials"])  # 72 registers fit 2 and 3
    assert record["chosen"] == chosen
    best = min(record["trials"], key=lambda t: t["predicted_us"])
    assert (best["predicted_us"] < record["predicted_all_us"]) == (chosen == "budget")
    k = best["veus_per_sm"] if chosen == "budget" else 1
    assert manifest["stats"]["veus_per_sm"] == record["veus_per_sm"] == k and manifest["num_veus"] == 132 * k
    assert any(is_fat(op.kernel) for op in built.ops) == (chosen == "all")
    assert "register budget" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.nvcc
def test_instantiation_usage_bounds_the_interpreter_and_is_cached(tmp_path: Path, monkeypatch) -> None:
    """Per instantiation, ptxas' registers of an interpreter holding it alone: the interpreter holding them all needs
    at least each of them (it is their max, give or take ptxas' allocation); a second ask compiles nothing."""
    import vdevice.occupancy as occ
    from rammer.build import build_model
    from toolchain.nvcc import find_nvcc
    from vdevice.codegen import generate
    if find_nvcc() is None:
        pytest.skip("needs nvcc: the figures come from ptxas")
    path = tmp_path / "m.onnx"
    onnx.save(cnn_model(batch=2, channels=64, size=8, groups=4), path)
    built = build_model(path, tmp_path / "out", target="cpu", veus=4, quiet=True, compile_check=False)
    cache = tmp_path / "cache"
    usage = occ.instantiation_usage(built.ops, built.sources, cache=cache)
    regs = {e: u.registers for e, u in usage.items()}
    assert len(regs) >= 3 and all(16 <= r <= 255 for r in regs.values())
    gen = generate(built.ops, built.sources)
    whole = occ.interpreter_usage(gen.source, gen.include_dirs).registers
    # give or take ptxas' allocation, both ways: conv_tc<32, 32, 0> takes 119 registers alone and the interpreter
    # holding it and six others 96 (nvcc 13.0, sm_90)
    assert max(regs.values()) - 32 <= whole <= max(regs.values()) + 16
    monkeypatch.setattr(occ, "interpreter_usage", lambda *a, **k: pytest.fail("the cache was not used"))
    assert occ.instantiation_usage(built.ops, built.sources, cache=cache) == usage


@pytest.mark.nvcc
@pytest.mark.parametrize("channels,groups", [(64, 4), (24, 3)])
def test_build_sizes_vEU_shared_memory_as_the_executor_lays_it_out(tmp_path: Path, channels: int,
                                                                   groups: int) -> None:
    """The occupancy arithmetic of a GPU build sees each vEU's shared memory as the executor will request it: the
    converted layouts (in dynamic shared memory, which ptxas does not report) sized by nvcc from the PTX agree with
    the sizes the CPU emulator's compiler measures at run time, and so does the whole vEU footprint."""
    from rammer.build import build_model
    from scheduler.search import veu_shared_bytes
    from vdevice.program import used_ops
    from toolchain.nvcc import find_nvcc
    from vdevice.occupancy import device_layout_sizes
    if find_nvcc() is None:
        pytest.skip("needs nvcc: the layouts are read from its PTX")
    path = tmp_path / "m.onnx"
    onnx.save(cnn_model(batch=2, channels=channels, size=8, groups=groups), path)
    built = build_model(path, tmp_path / "out", target="cpu", veus=4, quiet=True)
    ex = built.executor("persistent")
    measured = [int(v) for v in ex.vd.layout_sizes]
    assert sum(measured[1:]) > 0  # some rKernel of the model keeps a layout in shared memory
    assert device_layout_sizes(built.ops, built.sources) == measured
    runs = [used_ops(p) for p in built.programs]
    assert veu_shared_bytes(built.ops, built.sources, runs) == max(ld.smem for ld in ex.loaded)
