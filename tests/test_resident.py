"""Weight-stationary recurrent layers (docs/ARCHITECTURE.md §7): a vEU's resident region on the CPU emulator, the
program check for pins and overwrites, the packed-weight layout against numpy, the scheduler's pinning and its
fallbacks, and lstm-tc built with resident layers against onnxruntime, with its weight traffic counted from the
model's ONNX initializers."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from kernel_corpus.ops.rnn import THREADS, pack_lstm_weights, resident_units
from vdevice.target import Target
from vdevice.program import (ArgRef, KernelRef, Op, Program, ProgramError, Resident, TaskRef, check_resident,
                             validate)

SOURCES = {p.name: p.read_text() for p in sorted((Path(__file__).parent / "resident_kernels").glob("*.cu"))}
needs_emulator = pytest.mark.skipif(importlib.util.find_spec("cuda_emu") is None,
                                    reason="cuda_emu (the CPU emulator) is not available")
F32 = np.float32


# ---- the packed layout and its sizing, against numpy ---------------------------------------------------------
@pytest.mark.parametrize("hidden,isize,units,bias", [(37, 20, 8, True), (70, 0, 16, False), (24, 5, 5, True),
                                                     (256, 256, 26, True)])
def test_packed_slices_give_the_gates_of_the_unpacked_weights(hidden: int, isize: int, units: int,
                                                              bias: bool) -> None:
    """Block b of P times [x | h | 1] gives gates g*H + b*J + jj at column g*J + jj: numpy on both layouts."""
    rng = np.random.default_rng(hidden)
    wt = rng.standard_normal((isize, 4 * hidden)).astype(F32) if isize else None
    rt = rng.standard_normal((hidden, 4 * hidden)).astype(F32)
    b = rng.standard_normal(4 * hidden).astype(F32) if bias else None
    x, h = rng.standard_normal(isize), rng.standard_normal(hidden)
    want = h @ rt + (x @ wt if wt is not None else 0) + (b if b is not None else 0)
    p = pack_lstm_weights(wt, rt, b, hidden, units)
    assert p.shape == (-(-hidden // units), isize + hidden + 1, 4 * units)
    v = np.concatenate([x, h, [1.0]])
    for blk in range(p.shape[0]):
        cols = v @ p[blk].astype(np.float64)
        for g in range(4):
            for jj in range(units):
                j = blk * units + jj
                expect = want[g * hidden + j] if j < hidden else 0.0
                assert abs(cols[g * units + jj] - expect) < 1e-9 * (1 + abs(expect)) + 1e-4


@pytest.mark.parametrize("rows,hidden,budget", [(512, 256, 166_784), (256, 256, 166_784), (64, 32, 40_000),
                                                (512, 256, 9_000)])
def test_resident_units_fit_the_budget_with_fewest_rtasks(rows: int, hidden: int, budget: int) -> None:
    units = resident_units(rows, hidden, budget)
    assert units is not None
    slice_bytes = 4 * (rows + 1) * 4 * units
    blocks = -(-hidden // units)
    assert slice_bytes <= budget and 4 * units <= THREADS
    fewest = max(-(-hidden // (budget // (16 * (rows + 1)))), -(-hidden // (THREADS // 4)))
    assert blocks == fewest  # no fewer rTasks could hold the weights, and J is as even as that allows
    assert units * blocks - hidden < blocks


def test_resident_units_refuse_a_slice_that_cannot_fit() -> None:
    assert resident_units(512, 256, 16 * 513 - 1) is None


# ---- the vDevice: the region survives, pins are checked ------------------------------------------------------
N = 24  # floats per resident slice (a multiple of 4: slices are whole 16-byte units)


def _resident_ops(blocks: int, scale: float = 1.5) -> list[Op]:
    """fill (the family's load), scribble (overwrites src and its own per-rTask area), use twice (readers)."""
    fam = Resident("fam", 4 * N, load=True)
    k = lambda name, layout=None, targs=(): KernelRef("resident.cu", f"{name}__rtask", layout, targs,  # noqa: E731
                                                     (blocks,), (64,))
    n = ArgRef.scalar("int32", N)
    return [Op("fill", k("fill"), (ArgRef.buf("src"), n), fam),
            Op("scribble", k("scribble", "scribble__rt_shared", (512,)), (ArgRef.buf("src"), n)),
            Op("use0", k("use"), (ArgRef.buf("y0"), ArgRef.buf("src"), n, ArgRef.scalar("float32", scale)),
               Resident("fam", 4 * N)),
            Op("use1", k("use"), (ArgRef.buf("y1"), ArgRef.buf("src"), n, ArgRef.scalar("float32", -scale)),
               Resident("fam", 4 * N))]


def _resident_program(ops: list[Op], veus: int, pins: list[int], reader_pins: list[int] | None = None) -> Program:
    """fill and the readers on `pins` (rTask r on pins[r]), scribble rTask r on the vEU after pins[r]; every op
    waits for the whole op before it."""
    prog = Program(ops, veus)
    blocks = ops[0].kernel.rtasks
    where = [pins, [(p + 1) % veus for p in pins], reader_pins or pins, reader_pins or pins]
    for op, veus_of in enumerate(where):
        for r in range(blocks):
            if op:
                prog.wait_ops(TaskRef(op, r), [op - 1])
            prog.append(TaskRef(op, r), veus_of[r])
    return prog


@needs_emulator
@pytest.mark.parametrize("veus,blocks,seed", [(1, 1, 0), (2, 2, 1), (3, 2, 2), (5, 4, 3), (8, 8, 4), (8, 3, 5)])
def test_resident_region_survives_other_rtasks(veus: int, blocks: int, seed: int) -> None:
    """After the load, scribble overwrites the global weights and fills a 2 KB per-rTask layout on the same vEUs:
    readers still see the original values (numpy), so they read the region and nothing below it touched it."""
    from vdevice.executors import PersistentExecutor, VDevice
    rng = np.random.default_rng(seed)
    ops = _resident_ops(blocks)
    pins = [int(v) for v in rng.permutation(veus)[:blocks]]
    prog = _resident_program(ops, veus, pins)
    validate(prog, [(0, 1), (1, 2), (2, 3)])
    src = rng.standard_normal(blocks * N).astype(F32)
    bufs = {"src": src.copy(), "y0": np.zeros_like(src), "y1": np.zeros_like(src)}
    vd = VDevice(ops, SOURCES, bufs, "cpu")
    PersistentExecutor(ops, [prog], SOURCES, bufs, vdevice=vd).run(bufs)
    np.testing.assert_array_equal(bufs["src"], np.full_like(src, -7.0))  # scribble did overwrite global memory
    np.testing.assert_array_equal(bufs["y0"], src * F32(1.5))
    np.testing.assert_array_equal(bufs["y1"], src * F32(-1.5))


@needs_emulator
def test_memcheck_catches_a_reader_that_overruns_its_slice() -> None:
    """The region ends the vEU's shared memory: a reader told its slice is 4N bytes that reads N + 8 floats is an
    out-of-bounds shared read for the emulator's memcheck, in the rKernel that made it."""
    from vdevice.executors import PersistentExecutor, VDevice, VDeviceError
    ops = _resident_ops(2)
    over = Op("use0", ops[2].kernel, (*ops[2].args[:2], ArgRef.scalar("int32", N + 8), ops[2].args[3]), ops[2].resident)
    ops[2] = over
    prog = _resident_program(ops, 2, [0, 1])
    src = np.arange(2 * N + 16, dtype=F32)
    bufs = {"src": src, "y0": np.zeros_like(src), "y1": np.zeros(2 * N, F32)}
    vd = VDevice(ops, SOURCES, bufs, "cpu", sanitize=("memcheck",))
    with pytest.raises(VDeviceError, match=r"memcheck: .*out-of-bounds read of 4 bytes at extern __shared__.*use__rtask"):
        PersistentExecutor(ops, [prog], SOURCES, bufs, vdevice=vd).run(bufs)


def test_a_reader_pinned_to_the_wrong_veu_is_refused() -> None:
    ops = _resident_ops(3)
    good = _resident_program(ops, 4, [0, 1, 2])
    check_resident(good)
    bad = _resident_program(ops, 4, [0, 1, 2], reader_pins=[1, 0, 2])
    with pytest.raises(ProgramError, match="vEU 0: rTask 1 of op 'use0' reads resident slice 1 of family 'fam', "
                                           "but the vEU's region holds slice 0 of family 'fam'"):
        validate(bad, [(0, 1), (1, 2), (2, 3)])


def test_an_overwriting_load_and_a_reader_without_load_are_refused() -> None:
    ops = _resident_ops(2)
    other = Op("fill_other", ops[0].kernel, ops[0].args, Resident("other", 4 * N, load=True))
    ops = ops[:2] + [other] + ops[2:]
    prog = Program(ops, 2)
    for op, veus_of in enumerate([[0, 1], [1, 0], [0, 1], [0, 1], [0, 1]]):
        for r in range(2):
            if op:
                prog.wait_ops(TaskRef(op, r), [op - 1])
            prog.append(TaskRef(op, r), veus_of[r])
    with pytest.raises(ProgramError, match="holds slice 0 of family 'other'"):
        check_resident(prog)
    lonely = Program(ops[3:4], 1)
    lonely.append(TaskRef(0, 0), 0)
    lonely.append(TaskRef(0, 1), 0)
    with pytest.raises(ProgramError, match="holds nothing"):
        check_resident(lonely)


def test_resident_region_sits_after_the_control_block() -> None:
    """Shared memory per vEU: per-rTask area, control block, then the largest resident slice (hand-derived)."""
    from vdevice.codegen import ArgTable, encode, generate
    from vdevice.tables import INSTR, VD_RESIDENT
    ops = _resident_ops(2)
    prog = _resident_program(ops, 2, [1, 0])
    gen = generate(ops, SOURCES)
    tables = encode(prog, gen, ArgTable.build(ops))
    assert tables.resident_bytes == 4 * N
    layouts = [48, 0, 2048, 0]  # header, then per instantiation (fill, scribble<512>, use: sorted by key)
    smem, ctl = tables.smem_bytes(layouts)
    assert (smem, ctl) == (2048 + 48 + 4 * N, 2048)
    code = tables.instr[:, INSTR.column("code")]
    runs = code != 0xFFFFFFFF
    flagged = int((((code & VD_RESIDENT) != 0) & runs).sum())
    assert flagged == 6  # fill and both readers, 2 rTasks each; scribble and the pad row not


# ---- the scheduler and the build: lstm-tc with resident layers ------------------------------------------------
def _lstm_small(tmp_path: Path) -> Path:
    from rammer.zoo import generate
    path = tmp_path / "lstm.onnx"
    onnx.save(generate("lstm-tc", batch=1, small=True), str(path))
    return path


def _initializer_bytes(model: Path) -> dict[str, int]:
    """Per ONNX initializer name, its bytes: the independent count."""
    return {t.name: numpy_helper.to_array(t).nbytes for t in onnx.load(str(model)).graph.initializer}


def _check(built, model: Path, seed: int = 0, kind: str = "persistent") -> None:
    """The build's outputs (run by the `kind` executor) against onnxruntime on random inputs."""
    import onnxruntime as ort
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(seed).standard_normal(sess.get_inputs()[0].shape).astype(F32)
    feeds = {sess.get_inputs()[0].name: x}
    got = built.run(feeds, kind=kind)
    for out, want in zip(sess.get_outputs(), sess.run(None, feeds)):
        np.testing.assert_allclose(got[out.name], want, rtol=1e-4, atol=1e-5)


def _pinned_families(built) -> dict[str, list[tuple[int, int, int]]]:
    """family -> (op index, rtask, vEU) of every pinned rTask of the built programs."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    for prog in built.programs:
        for v in range(prog.num_veus):
            for task in prog.runs(v):
                res = prog.ops[task.op].resident
                if res is not None:
                    out.setdefault(res.family, []).append((task.op, task.rtask, v))
    return out


@needs_emulator
@pytest.mark.parametrize("veus", [3, 8])
def test_lstm_tc_small_runs_weight_stationary_and_reads_weights_once(tmp_path: Path, veus: int) -> None:
    from rammer.build import build_model
    model = _lstm_small(tmp_path)
    built = build_model(model, tmp_path / "out", target="cpu", veus=veus, quiet=True)
    _check(built, model)
    _check(built, model, seed=5, kind="op-by-op")  # no regions there: the same kernels read global memory
    families = _pinned_families(built)
    assert len(families) == 3  # one per layer
    for tasks in families.values():
        homes: dict[int, set[int]] = {}
        for _, rtask, v in tasks:
            homes.setdefault(rtask, set()).add(v)
        assert all(len(vs) == 1 for vs in homes.values())  # rTask r of every step on one vEU
        assert len(set.union(*homes.values())) == len(homes)  # distinct rTasks on distinct vEUs
    all_veus = [next(iter(vs)) for tasks in families.values()
                for vs in [{v for _, r, v in tasks if r == rr} for rr in {r for _, r, _ in tasks}]]
    assert len(all_veus) == len(set(all_veus))  # layers on disjoint vEUs
    stats = built.manifest.stats
    own = _initializer_bytes(model)
    assert stats["model_weight_bytes"] == sum(own.values())
    # each layer's W and R (and half of B: the two ONNX biases are summed) read at least once, all within 1.2x
    needed = sum(v for k, v in own.items() if "lstm_b" not in k) + sum(v // 2 for k, v in own.items() if "lstm_b" in k)
    assert needed <= stats["weight_bytes_read"] <= 1.2 * stats["model_weight_bytes"]
    assert stats["resident_families"] == 3
    assert "resident families pinned" in (built.folder / "report.md").read_text()


@needs_emulator
def test_streaming_weight_traffic_matches_the_count_from_the_initializers(tmp_path: Path) -> None:
    """Without the pass every step streams its weights: per layer of T steps, hoisted layer 0 reads W and the
    summed bias once and R on T - 1 steps; stacked layers W and the bias on T steps, R on T - 1; each reads its
    zero initial c once (H floats)."""
    from rammer.build import build_model
    model = _lstm_small(tmp_path)
    built = build_model(model, tmp_path / "out", target="cpu", veus=3, quiet=True,
                        disable_passes=("resident_weights",))
    _check(built, model)
    own = onnx.load(str(model)).graph.initializer
    steps = onnx.load(str(model)).graph.input[0].type.tensor_type.shape.dim[0].dim_value
    ws, rs, bs = ([numpy_helper.to_array(t).nbytes for t in own if tag in t.name] for tag in ("lstm_w", "lstm_r",
                                                                                               "lstm_b"))
    hidden_bytes = bs[0] // 8
    want = ws[0] + bs[0] // 2 + rs[0] * (steps - 1) + hidden_bytes
    want += sum(w * steps + b // 2 * steps + r * (steps - 1) + hidden_bytes for w, r, b in zip(ws[1:], rs[1:], bs[1:]))
    assert built.manifest.stats["weight_bytes_read"] == want
    assert built.manifest.stats["resident_families"] == 0


@needs_emulator
def test_families_beyond_the_veus_or_the_room_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two vEUs hold two of the three layers' slices: the pass leaves the third layer's streaming cells (a note
    says so); with no room for any slice it leaves every cell as it was."""
    from rammer.build import build_model
    model = _lstm_small(tmp_path)
    built = build_model(model, tmp_path / "two", target="cpu", veus=2, quiet=True)
    _check(built, model, seed=1)
    stats = built.manifest.stats
    assert stats["resident_families"] == 2 and len(_pinned_families(built)) == 2
    assert any("stream their weights" in n for n in stats["notes"])
    last = [op.kernel.rkernel for op in built.ops if op.name.startswith("n_lstm_2/t3/")]  # the top layer's step
    assert last and all("lstm_cell_vec4" in k or "lstm_cell_fused" in k for k in last)
    assert stats["weight_bytes_read"] > 1.2 * stats["model_weight_bytes"]
    monkeypatch.setattr(Target, "resident_budget", property(lambda self: 100))
    built = build_model(model, tmp_path / "none", target="cpu", veus=8, quiet=True)
    _check(built, model, seed=2)
    assert built.manifest.stats["resident_families"] == 0
    assert not [op for op in built.ops if op.resident is not None or "resident" in op.kernel.rkernel]


@needs_emulator
def test_a_family_the_scheduler_cannot_pin_runs_unpinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Packed for more vEUs than the plan has (the pass not told the count), the third family finds no free vEU:
    its steps run unpinned, reading the packed weights from global memory (no VD_RESIDENT, a load that does
    nothing), still right against onnxruntime, and counted and priced as streaming."""
    from rammer.build import build_model
    from scheduler import passes
    monkeypatch.setattr(passes, "resident_veus", lambda target: None)
    model = _lstm_small(tmp_path)
    built = build_model(model, tmp_path / "b", target="cpu", veus=2, quiet=True)
    _check(built, model, seed=3)
    assert built.manifest.stats["resident_families"] == 2
    unpinned = [op for op in built.ops if "lstm_cell_resident" in op.kernel.rkernel and op.resident is None]
    assert unpinned and len({op.name.split("/t")[0] for op in unpinned}) == 1  # one whole layer
    assert built.manifest.stats["weight_bytes_read"] > 1.2 * built.manifest.stats["model_weight_bytes"]


# ---- the resident cell: legacy kernels against the converted ones, pinned, against numpy -----------------------
def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


@needs_emulator
@pytest.mark.parametrize("hidden,isize,units,steps,veus,seed", [(37, 20, 8, 4, 5, 0), (20, 0, 7, 3, 8, 1),
                                                                (24, 12, 24, 3, 1, 2)])
def test_converted_resident_cells_match_legacy_and_numpy(hidden: int, isize: int, units: int, steps: int,
                                                         veus: int, seed: int) -> None:
    """One LSTM layer of `steps` steps through LSTMCell/resident: the legacy kernels launch by launch (reading P from
    global memory) against numpy, then the converted kernels in one persistent program with the family pinned
    (reading P from the vEUs' regions) bit for bit against the legacy ones."""
    convert = pytest.importorskip("converter.convert")
    from kernel_corpus.bindings import LEGACY_DIR, NodeInfo, TensorInfo
    from kernel_corpus.cpu_run import build_module, run_launches
    from kernel_corpus.ops.rnn import RESIDENT
    from scheduler.plan import ProgramOp, default_vdevice_op
    from vdevice.executors import PersistentExecutor, VDevice

    rng = np.random.default_rng(seed)
    g4 = 4 * hidden
    wt = (rng.standard_normal((isize, g4)) * 0.3).astype(F32) if isize else None
    rt = (rng.standard_normal((hidden, g4)) * 0.3).astype(F32)
    bias = (rng.standard_normal(g4) * 0.3).astype(F32)
    xs = rng.standard_normal((steps, 1, max(isize, 1))).astype(F32)
    pre_rows = None if isize else (rng.standard_normal((steps, 1, g4)) * 0.5).astype(F32)  # a hoisted x·W + b
    p = pack_lstm_weights(wt, rt, bias if isize else None, hidden, units)
    c0 = np.zeros((1, hidden), F32)
    t_ = lambda *s: TensorInfo(s)  # noqa: E731

    def node(t: int) -> NodeInfo:
        ins = [t_(1, isize) if isize else None, t_(isize, g4) if isize else None, t_(1, hidden) if t else None,
               t_(hidden, g4) if t else None, t_(g4,) if isize else t_(1, g4), t_(1, hidden), t_(*p.shape)]
        return NodeInfo("LSTMCell", f"s{t}", ins, [t_(1, hidden), t_(1, hidden)],
                        {"family": "layer", "family_head": int(t == 0)})

    # numpy truth and the legacy kernels, step by step
    module = build_module(RESIDENT.source, sorted({ln.expr for t in range(steps) for ln in RESIDENT.launch(node(t))}))
    h, c = None, c0
    want_h, want_c = np.zeros((1, hidden)), c0.astype(np.float64)
    legacy: list[tuple[np.ndarray, np.ndarray]] = []
    for t in range(steps):
        gates = (want_h @ rt if t else 0) + (xs[t] @ wt + bias if isize else pre_rows[t])
        i, o, f, g = np.split(gates, 4, axis=1)
        want_c = _sigmoid(f) * want_c + _sigmoid(i) * np.tanh(g)
        want_h = _sigmoid(o) * np.tanh(want_c)
        inputs = [xs[t] if isize else None, wt, h, rt if t else None, bias if isize else pre_rows[t], c, p]
        h, c = run_launches(module, RESIDENT.launch(node(t)), node(t), inputs)
        legacy.append((h, c))
        np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-6)
    # the converted kernels, pinned, in one persistent program
    names = lambda t: [f"x{t}" if isize else "", "wt" if isize else "", f"h{t - 1}" if t else "",  # noqa: E731
                       "rt" if t else "", "bias" if isize else f"pre{t}", f"c{t - 1}" if t else "c_init", "P"]
    pops = [ProgramOp(f"s{t}", "LSTMCell", "resident", "rnn.cu", k, ln, names(t), [f"h{t}", f"c{t}"], pinned=True)
            for t in range(steps) for k, ln in enumerate(RESIDENT.launch(node(t)))]
    ops = [default_vdevice_op(op) for op in pops]
    blocks = p.shape[0]
    pins = [int(v) for v in rng.permutation(veus)[:blocks]]  # a family needs one vEU per rTask
    assert len(pins) == blocks
    prog = Program(ops, veus)
    for k, op in enumerate(ops):
        for r in range(op.kernel.rtasks):
            if k:
                prog.wait_ops(TaskRef(k, r), [k - 1])
            prog.append(TaskRef(k, r), pins[r])
    validate(prog, [(k - 1, k) for k in range(1, len(ops))])
    bufs = {"P": p, "c_init": c0, "rt": rt, "wt": wt if isize else np.zeros(1, F32), "bias": bias,
            **{f"x{t}": xs[t] for t in range(steps)}, **{f"pre{t}": pre_rows[t] if pre_rows is not None else
                                                         np.zeros(1, F32) for t in range(steps)},
            **{f"{v}{t}": np.full((1, hidden), np.nan, F32) for t in range(steps) for v in "hc"}}
    converted = {"rnn.cu": convert.convert_source((LEGACY_DIR / "rnn.cu").read_text(), "rnn.cu").output}
    vd = VDevice(ops, converted, bufs, "cpu")
    PersistentExecutor(ops, [prog], converted, bufs, vdevice=vd).run(bufs)
    for t, (h_legacy, c_legacy) in enumerate(legacy):
        np.testing.assert_array_equal(bufs[f"h{t}"], h_legacy)
        np.testing.assert_array_equal(bufs[f"c{t}"], c_legacy)
