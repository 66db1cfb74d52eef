"""J, the hidden units per weight-stationary rTask, as a choice (issue 24): the packed layout at several J against
numpy, the capped slice sizing and the candidate caps against hand arithmetic, zoo models built at a J other than
the fewest-fit one and checked by `rammer run --check` (onnxruntime) on the CPU emulator, and the build's choice
against a hand reading of the cost model's critical path."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from kernel_corpus.ops.rnn import pack_lstm_weights, resident_units
from scheduler.passes import spread_blocks, unit_caps
from vdevice.target import Target, TargetKind

needs_emulator = pytest.mark.skipif(importlib.util.find_spec("cuda_emu") is None,
                                    reason="cuda_emu (the CPU emulator) is not available")
F32 = np.float32


# ---- the packed layout at several J, against numpy -------------------------------------------------------------
@pytest.mark.parametrize("hidden,isize,units", [(37, 20, 1), (37, 20, 3), (37, 0, 10), (256, 256, 7), (256, 256, 10),
                                                (256, 256, 20), (64, 9, 64), (33, 12, 13)])
def test_pack_round_trip_at_several_j(hidden: int, isize: int, units: int) -> None:
    """Unpacking P by the layout's index rule (block b, column g*J + jj <- gate column g*H + b*J + jj) gives back
    [Wt; Rt; bias]; every padded column (b*J + jj >= H) is zero."""
    rng = np.random.default_rng(hidden * 100 + units)
    wt = rng.standard_normal((isize, 4 * hidden)).astype(F32) if isize else None
    rt = rng.standard_normal((hidden, 4 * hidden)).astype(F32)
    bias = rng.standard_normal(4 * hidden).astype(F32)
    full = np.concatenate([a for a in (wt, rt, bias[None]) if a is not None], axis=0)
    p = pack_lstm_weights(wt, rt, bias, hidden, units)
    blocks = -(-hidden // units)
    assert p.shape == (blocks, isize + hidden + 1, 4 * units)
    back = np.zeros_like(full)
    for b in range(blocks):
        for g in range(4):
            for jj in range(units):
                j = b * units + jj
                if j < hidden:
                    back[:, g * hidden + j] = p[b, :, g * units + jj]
                else:
                    assert not p[b, :, g * units + jj].any()
    np.testing.assert_array_equal(back, full)


# ---- the capped sizing and the candidates, against hand arithmetic ----------------------------------------------
def test_capped_units_keep_the_budget_and_even_out() -> None:
    """Full-size LSTM-TC's stacked layer (rows I + H = 512, H = 256) at 2 vEUs per SM: the budget allows
    budget // (16 * 513) units, so 26 rTasks of J = 10 (ceil(256 / 26) = 10); a cap of 7 gives 37 rTasks of 7, a cap
    of 9 gives ceil(256 / 9) = 29 rTasks evened to J = ceil(256 / 29) = 9, a cap above the budget's J changes
    nothing, and the hoisted layer 0 (rows 256) at the same cap 7 also packs 37 rTasks of 7."""
    budget = Target(TargetKind.GPU, 264, 2).resident_budget
    most = budget // (16 * 513)
    assert most == 10  # the hand figure the rest of this test uses (113 KB share less header and 16 KB headroom)
    assert resident_units(512, 256, budget) == 10
    assert resident_units(512, 256, budget, cap=7) == 7
    assert resident_units(512, 256, budget, cap=9) == 9
    assert resident_units(512, 256, budget, cap=12) == 10
    assert resident_units(256, 256, budget) == 20 and resident_units(256, 256, budget, cap=7) == 7
    assert resident_units(100, 30, budget, cap=4) == 4 and resident_units(100, 30, budget, cap=6) == 6
    assert resident_units(100, 30, budget, cap=8) == 8  # ceil(30 / 8) = 4 rTasks, evened: ceil(30 / 4) = 8
    assert resident_units(100, 30, budget, cap=9) == 8


FULL_LSTM_TC = [(256, 20)] + [(256, 10)] * 9  # layer 0 (x hoisted: rows H) at J = 20, layers 1-9 at J = 10


def test_caps_for_full_size_lstm_tc_by_hand() -> None:
    """Full-size LSTM-TC at 2/SM: 13 + 9 x 26 = 247 rTasks per step at the fewest-fit J. Lower caps only split layer
    0 (the others' J = 10 is already at most every cap down to 10): cap 19 -> 14 + 234 = 248, 18 -> 15 (249),
    17 and 16 -> 16 (250), 15 -> 18 (252), 14 -> 19 (253), 13 -> 20 (254), 12 -> 22 (256), 11 -> 24 (258),
    10 -> 26 (260); cap 9 splits every layer into 29 rTasks: 290 > 264 vEUs. Nine block counts, three evenly spaced
    (the 4th, 6th and 9th): caps 15, 13, 10."""
    assert spread_blocks(FULL_LSTM_TC, 20) == 247 and spread_blocks(FULL_LSTM_TC, 9) == 290
    assert unit_caps(FULL_LSTM_TC, 264) == [15, 13, 10]
    assert unit_caps(FULL_LSTM_TC, 264, most=1) == [10]
    assert unit_caps(FULL_LSTM_TC, 250) == [19, 18, 17]  # three counts fit: all of them, 17 the largest cap of 250
    assert unit_caps(FULL_LSTM_TC, 247) == []  # no vEU free: the fewest-fit J alone
    assert unit_caps(FULL_LSTM_TC, 100) == []  # fewer vEUs than the families pin now: nothing to spread
    assert unit_caps([], 264) == []


# ---- zoo models at a J other than the fewest-fit one, checked by `rammer run --check` -----------------------------
def _run_check(folder: Path, seed: int) -> None:
    """`rammer run FOLDER --check --seed SEED` (onnxruntime on the model's own graph) exits 0."""
    from rammer.cli import run_command
    assert run_command(str(folder), check=True, seed=seed) == 0


def _family_shapes(built) -> dict[str, int]:
    """family -> rTasks per step of its resident cells (the launches of lstm_cell_resident)."""
    out: dict[str, int] = {}
    for op in built.ops:
        if op.resident is not None and "lstm_cell_resident" in op.kernel.rkernel:
            grid = op.kernel.grid
            out[op.resident.family] = grid[0] * grid[1] * grid[2]
    return out


@needs_emulator
@pytest.mark.parametrize("model,veus,units,families,hidden", [("lstm-tc", 12, 8, 3, 32), ("lstm-tc", 24, 5, 3, 32),
                                                               ("seq2seq", 16, 8, 4, 32),
                                                               ("deepspeech2", 12, 6, 2, 32)])
def test_zoo_small_at_a_forced_j_passes_run_check(tmp_path: Path, model: str, veus: int, units: int, families: int,
                                                  hidden: int) -> None:
    """The small zoo RNNs keep J = 32 (one rTask per step) by their own choice; forced to J = `units` each family
    runs ceil(H / J) pinned rTasks per step, every family still pinned, and the outputs match onnxruntime."""
    from rammer.build import build_model
    from rammer.zoo import generate
    path = tmp_path / f"{model}.onnx"
    onnx.save(generate(model, batch=1, small=True), str(path))
    built = build_model(path, tmp_path / "out", target="cpu", veus=veus, quiet=True, resident_units=units)
    assert built.manifest.stats["resident_families"] == families
    assert sorted(_family_shapes(built).values()) == [-(-hidden // units)] * families
    _run_check(tmp_path / "out", seed=veus + units)


# ---- the choice, against a hand reading of the cost model ---------------------------------------------------------
def _one_layer(tmp_path: Path, steps: int = 4, isize: int = 32, hidden: int = 256) -> Path:
    sys.path.insert(0, str(Path(__file__).parent))
    from test_rnn_passes import rnn_model
    model, _ = rnn_model("LSTM", steps, 1, isize, hidden, "forward", 0, initial=False)
    path = tmp_path / "one.onnx"
    onnx.save(model, str(path))
    return path


def _build(path: Path, out: Path, veus: int, units: int | None = None):
    from rammer.build import build_model
    return build_model(path, out, target="gpu", veus=veus, quiet=True, compile_check=False, launches=False,
                       resident_units=units)


def test_choice_spreads_when_veus_are_free_and_keeps_fewest_fit_when_not(tmp_path: Path) -> None:
    """One LSTM layer, H = 256, x hoisted (rows 256), on 40 vEUs at 1/SM: the fewest-fit J is 37 (7 rTasks); the
    candidates are caps 19, 13 and 7 (14, 20 and 37 rTasks <= 40 vEUs). By hand, each recurrent step on the
    critical path costs dispatch + body + argument fetch + hand-off: the body's FMAs are (rows + 1) x 4J, linear in J,
    and the hand-off table (scheduler/dispatch_costs.py STEP_BARRIER_US) falls from 1.448 us at fan-in 1 to 1.411 at
    15 and 1.310 at 131, so the smallest J, 7, has the shortest path: the build keeps it, predicted faster than the
    same model forced to J = 37. On 7 vEUs no vEU is free beside the 7 rTasks: J = 37 stays, at the forced build's
    prediction."""
    path = _one_layer(tmp_path)
    fewest = _build(path, tmp_path / "j37", 40, units=37)
    chosen = _build(path, tmp_path / "chosen", 40)
    assert sorted(set(_family_shapes(fewest).values())) == [7]
    assert sorted(set(_family_shapes(chosen).values())) == [37]
    assert chosen.manifest.stats["predicted_us"] < fewest.manifest.stats["predicted_us"]
    line = next(n for n in chosen.manifest.stats["notes"] if n.startswith("resident J"))
    assert "J 37:" in line and "J 19:" in line and "J 13:" in line and line.endswith("kept J = 7")
    tight = _build(path, tmp_path / "tight", 7)
    tight37 = _build(path, tmp_path / "tight37", 7, units=37)
    assert sorted(set(_family_shapes(tight).values())) == [7]
    assert not [n for n in tight.manifest.stats["notes"] if n.startswith("resident J")]
    assert tight.manifest.stats["predicted_us"] == pytest.approx(tight37.manifest.stats["predicted_us"])


def test_a_negative_cap_is_refused() -> None:
    """J is at least 1 (0: the fewest-fit J): a negative cap is a one-line error from the options and the Target."""
    from rammer.build import BuildError, BuildOptions
    with pytest.raises(BuildError, match="resident units -1"):
        BuildOptions(resident_units=-1).check()
    with pytest.raises(ValueError, match="resident units must be >= 0"):
        Target(TargetKind.GPU, 132, resident_units=-2)
