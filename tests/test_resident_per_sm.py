"""Resident slices sized for k vEUs per SM (docs/ARCHITECTURE.md §7): the sizing arithmetic against hand-derived
H100 figures, a GPU build that searches k and keeps a plan whose vEUs fit the SM's shared memory, and a CPU build
with slices sized for two vEUs per SM checked against onnxruntime."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from test_scheduler import lstm_model

from kernel_corpus.ops.rnn import resident_units
from vdevice.occupancy import blocks_per_sm
from vdevice.target import H100, VEU_HEADER_BYTES, Target, TargetKind

KB = 1024
SM_SMEM = 228 * KB  # H100 shared memory per SM (CUDA C++ Programming Guide, compute capability 9.0)
RESERVED = 1 * KB  # the driver's reservation per block since sm_80
needs_emulator = pytest.mark.skipif(importlib.util.find_spec("cuda_emu") is None,
                                    reason="cuda_emu (the CPU emulator) is not available")

# k -> a vEU's share: 228 KB / k down to 128 B, less 1 KB, at most 227 KB; the headroom for rTask areas: the SM's
# 64 KB split k ways, at least 16 KB
SHARE = {1: 227 * KB, 2: 116736 - KB, 3: 77824 - KB, 4: 58368 - KB}
HEADROOM = {1: 64 * KB, 2: 32 * KB, 3: 65536 // 3, 4: 16 * KB}


def resident_budget(k: int) -> int:
    """The slice budget of a GPU target with k vEUs per SM (vdevice.target.Target.resident_budget)."""
    return Target(TargetKind.GPU, 132 * k, k).resident_budget


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_a_veus_share_of_shared_memory(k: int) -> None:
    """The share is what k blocks may each take and still co-reside (the occupancy arithmetic), and 128 B more is
    not."""
    assert H100.smem_share(k) == SHARE[k]
    assert blocks_per_sm(256, 32, SHARE[k]).blocks >= k
    assert blocks_per_sm(256, 32, SHARE[k] + 128).blocks < k


@pytest.mark.parametrize("k,budget", [(1, 166576), (2, 82608), (3, 54619), (4, 40624)])
def test_resident_budget_per_veus_per_sm(k: int, budget: int) -> None:
    """The slice budget: the share less the vEU header (TaskSlot 320 B with the wide tiles' words + Control 16 B)
    and the headroom, written out by hand."""
    assert SHARE[k] - 336 - HEADROOM[k] == budget
    assert resident_budget(k) == budget
    assert k * (budget + HEADROOM[k] + 336 + RESERVED) <= SM_SMEM


# Full-size LSTM-TC (hidden 256): a stacked layer packs Wt and Rt (512 rows + the bias: 513 x 16 B per unit), layer 0
# only Rt (hoisted x.W: 257 x 16 B). J = the fewest rTasks whose slice fits, then as even as that allows.
@pytest.mark.parametrize("k,stacked,first,pinned_layers", [
    (1, (20, 13), (37, 7), 10),   # 166576 // 8208 = 20 -> 13 rTasks; 166576 // 4112 = 40 -> 7 rTasks of 37
    (2, (10, 26), (20, 13), 10),  # 82608 // 8208 = 10; 13 + 9 x 26 = 247 <= 264 vEUs
    (3, (6, 43), (13, 20), 9),    # 54619 // 8208 = 6; 20 + 8 x 43 = 364, the ninth stacked layer needs 43 of 32
    (4, (4, 64), (9, 29), 8)])    # 40624 // 8208 = 4; 29 + 7 x 64 = 477, the eighth needs 64 of 51
def test_lstm_tc_slices_per_veus_per_sm(k: int, stacked: tuple[int, int], first: tuple[int, int],
                                        pinned_layers: int) -> None:
    for rows, (units, rtasks) in ((512, stacked), (256, first)):
        got = resident_units(rows, 256, resident_budget(k))
        assert got == units and -(-256 // units) == rtasks
        assert 16 * (rows + 1) * units <= resident_budget(k)
    left, layers = 132 * k, 0
    for rtasks in [first[1]] + [stacked[1]] * 9:  # the pass packs in layer order while the vEUs last
        if rtasks <= left:
            left, layers = left - rtasks, layers + 1
    assert layers == pinned_layers


def _tiny_lstm(tmp_path: Path) -> Path:
    """Two batch-1 layers of hidden 128 over 3 steps: a stacked layer's slices fill 1/SM's budget at J = 32 and
    need 7 rTasks at 2/SM, so sizing per k changes the packing."""
    path = tmp_path / "lstm.onnx"
    onnx.save(lstm_model(steps=3, batch=1, isize=128, hidden=128, layers=2), str(path))
    return path


@needs_emulator
def test_cpu_check_with_slices_sized_for_two_veus_per_sm(tmp_path: Path) -> None:
    """Sized for 2/SM (budget 82816 B), layer 0 (128 rows of Rt) packs J = 32 in 4 rTasks and layer 1 (256 rows)
    J = 19 in 7 (1/SM: 2 and 4); the weight-stationary build still matches onnxruntime, and its vEUs as the
    emulator lays them out fit two per SM."""
    import onnxruntime as ort

    from rammer.build import build_model
    model = _tiny_lstm(tmp_path)
    built = build_model(model, tmp_path / "out", target="cpu", veus=12, veus_per_sm=2, quiet=True,
                        resident_units=0)  # the fewest-fit J (the build's J choice would spread layer 0 over 5)
    slices = sorted(op.resident.slice_bytes for op in built.ops if op.resident is not None)
    assert set(slices) == {16 * 129 * 32, 16 * 257 * 19}
    per_family: dict[str, set[int]] = {}
    for prog in built.programs:
        for v in range(prog.num_veus):
            for task in prog.runs(v):
                res = prog.ops[task.op].resident
                if res is not None:
                    per_family.setdefault(res.family, set()).add(task.rtask)
    assert sorted(len(r) for r in per_family.values()) == [4, 7]
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    feeds = {i.name: np.random.default_rng(7).standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}
    got = built.run(feeds)
    for out, want in zip(sess.get_outputs(), sess.run(None, feeds)):
        np.testing.assert_allclose(got[out.name], want, rtol=1e-4, atol=1e-5)
    # the vEU's shared memory as the emulator lays it out (rTask areas with the converted layouts the compiler
    # measured, control block, region): two of them fit one H100 SM
    ex = built.executor("persistent")
    assert int(ex.vd.layout_sizes[0]) == VEU_HEADER_BYTES  # the sizing's header estimate is the runtime's kHeaderBytes
    for loaded in ex.loaded:
        assert loaded.tables.resident_bytes == 16 * 257 * 19
        assert 2 * (-(-(loaded.smem + RESERVED) // 128) * 128) <= SM_SMEM


@pytest.mark.slow  # a --target gpu build with four ptxas trials (minutes under load): CI's slow step runs it
@pytest.mark.nvcc
def test_gpu_build_searches_veus_per_sm_for_resident_slices(tmp_path: Path) -> None:
    """A GPU build of the tiny LSTM: sized for 1/SM its 130 KB slices hold one vEU per SM, so the build also sizes
    them for 2..4/SM, records every trial, and keeps a plan whose vEUs each fit their share of the SM: k x (area +
    control + region + the driver's 1 KB) <= 228 KB, with the region the built program's largest slice."""
    from rammer.build import build_model
    from toolchain.nvcc import find_nvcc
    if find_nvcc() is None:
        pytest.skip("needs nvcc: a --target gpu build takes the vEUs per SM from ptxas")
    model = _tiny_lstm(tmp_path)
    built = build_model(model, tmp_path / "out", target="gpu", quiet=True, profile="model", launches=False,
                        resident_units=0)  # the fewest-fit J: the search over vEUs per SM alone (test_resident_j)
    stats = json.loads((tmp_path / "out" / "build.json").read_text())["stats"]
    search = stats["resident_search"]
    assert search is not None, "the resident families held one vEU per SM and the build did not search"
    trials = search["trials"]
    assert [t["target"] for t in trials] == [1, 2, 3, 4]
    assert trials[0]["veus_per_sm"] == 1 and trials[0]["region_bytes"] == 16 * 129 * 64  # layer 0, J = 64
    for t in trials:
        assert 0 < t["region_bytes"] <= resident_budget(t["target"])
        assert t["veus_per_sm"] * (-(-(t["smem_bytes"] + RESERVED) // 128) * 128) <= SM_SMEM
        assert t["pinned"] == t["families"] == 2 and t["spill_bytes"] == 0
    assert trials[1]["veus_per_sm"] == 2  # 76 KB slices fit twice
    kept = next(t for t in trials if t["target"] == search["chosen"])
    per_sm = stats["veus_per_sm"]
    region = max(op.resident.slice_bytes for op in built.ops if op.resident is not None)
    assert region == kept["region_bytes"]
    assert per_sm * (-(-(kept["smem_bytes"] + RESERVED) // 128) * 128) <= SM_SMEM
    faster = [t for t in trials[1:] if t["veus_per_sm"] > 1 and t["pinned"] == 2
              and t["predicted_us"] < 0.98 * trials[0]["predicted_us"]]
    assert kept == (min(faster, key=lambda t: t["predicted_us"]) if faster else trials[0])
    assert "resident slices: tried" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize("trials,chosen", [
    ([(2, 10, 90.0)], 1), ([(2, 9, 80.0)], 0),               # faster but streams a layer the first plan pinned
    ([(2, 10, 90.0), (3, 9, 70.0)], 1), ([(2, 10, 99.0)], 0),  # within the 2% margin
    ([(1, 10, 50.0)], 0), ([(2, 10, 95.0), (3, 10, 85.0)], 2)])
def test_resident_choice_keeps_weight_stationary_plans(trials, chosen: int) -> None:
    """Against slices for 1/SM (1/SM, 10 families pinned, 100 us): the fastest sizing that reaches more vEUs per SM,
    pins every family and beats it by more than 2%."""
    from scheduler.search import ResidentChoice, ResidentTrial
    c = ResidentChoice([ResidentTrial(1, 10, 10, veus_per_sm=1, predicted_us=100.0)]
                       + [ResidentTrial(k + 1, 10, pinned, veus_per_sm=k, predicted_us=us) for k, pinned, us in trials])
    assert c.decide() == chosen
    assert c.to_json()["chosen"] == c.trials[chosen].target and len(c.to_json()["trials"]) == len(trials) + 1
