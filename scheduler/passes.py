"""Graph passes over the plain DFG: fold constants and BatchNorm, split RNN directions, alias views, unroll LSTMs
and GRUs, fuse MatMul epilogues and activations into their producers, drop dead nodes.

Each pass is a named `Pass` in `PASSES`, run in that order by `run_passes`; `rammer build --disable-pass NAME`
leaves one out and `--dump-after NAME` writes the graph after it as ONNX (scheduler/export.py). A pass returns how
many changes it made; `run_passes` records each pass's time and changes in `graph.pass_log`."""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from vdevice.target import Target

from kernel_corpus.bindings import contiguous_strides

from .concat_elim import eliminate_concats
from .dedupe import dedupe_nodes
from .fuse_elementwise import FUSED_BINARY, fuse_elementwise
from .fuse_residual import FUSED_CONV_ADD, fuse_residuals
from .graph import Graph, Node, SchedulerError, View, present, sole_reader, viewed_bases
from .reference import can_evaluate, evaluate

VIEW_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")
SHAPE_ONLY_OPS = ("Shape", "Size")
RANDOM_OPS = ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial")


Supports = Callable[[str], bool]  # does the corpus implement this op type?


@dataclass(frozen=True)
class Pass:
    """One graph pass: its name (for --disable-pass/--dump-after), what it does, and the op type it introduces
    (the pass is skipped when the corpus lacks it)."""

    name: str
    run: Callable[[Graph, Supports], int]
    about: str
    introduces: str | None = None


@dataclass(frozen=True)
class TargetPass:
    """A pass whose result depends on the Target (the vEUs, how many share an SM): run after the graph passes, on a
    copy of the passed graph, once per target a build tries (run_target_passes)."""

    name: str
    run: Callable[[Graph, Target], int]
    about: str


@dataclass
class PassRecord:
    """What one pass did in one build: changes made and seconds taken, or why it did not run."""

    name: str
    changes: int = 0
    seconds: float = 0.0
    skipped: str = ""

    def to_json(self) -> dict:
        """The build.json form."""
        return {"name": self.name, "changes": self.changes, "seconds": round(self.seconds, 4),
                **({"skipped": self.skipped} if self.skipped else {})}


def run_passes(g: Graph, supports: Supports | None = None, disabled: tuple[str, ...] | list[str] = (),
               after: Callable[[str, Graph], None] | None = None) -> Graph:
    """The standard pipeline (PASSES, in an order where each pass sees what the earlier ones simplified);
    `supports(op)` says whether the corpus implements an op type a pass would introduce (None: assume it does),
    `disabled` names passes to leave out, `after(name, graph)` is called after each pass that ran."""
    check_pass_names(disabled)
    supports = supports or (lambda op_type: True)
    g.pass_log = []
    for p in PASSES:
        if p.name in disabled:
            g.pass_log.append(PassRecord(p.name, skipped="disabled"))
            continue
        if p.introduces and not supports(p.introduces):
            g.pass_log.append(PassRecord(p.name, skipped=f"the corpus has no {p.introduces}"))
            continue
        run_one(g, p.name, functools.partial(p.run, g, supports), after)
    return g


def run_one(g: Graph, name: str, run: Callable[[], int], after: Callable[[str, Graph], None] | None) -> None:
    """Run one pass, log what it changed and how long it took, then call `after(name, graph)`."""
    t0 = time.perf_counter()
    changes = run()
    g.pass_log.append(PassRecord(name, int(changes or 0), time.perf_counter() - t0))
    if after is not None:
        after(name, g)


def run_target_passes(g: Graph, target: Target, disabled: tuple[str, ...] | list[str] = (),
                      after: Callable[[str, Graph], None] | None = None) -> Graph:
    """The target passes (TARGET_PASSES, after the graph passes) on a copy of a passed graph: a build that tries
    several targets imports and runs the graph passes once, and only these per target."""
    g = g.copy()
    for p in TARGET_PASSES:
        if p.name in disabled:
            g.pass_log.append(PassRecord(p.name, skipped="disabled"))
            continue
        run_one(g, p.name, functools.partial(p.run, g, target), after)
    return g


def pass_names() -> list[str]:
    """Every pass, in the order a build runs them: the graph passes, then the target passes."""
    return [p.name for p in PASSES] + [p.name for p in TARGET_PASSES]


def check_pass_names(names: tuple[str, ...] | list[str]) -> None:
    """One-line error for a pass name that does not exist."""
    known = pass_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SchedulerError(f"unknown pass '{unknown[0]}' (passes: {', '.join(known)})")


# ---- constant folding ------------------------------------------------------------------------------------
def fold_constants(g: Graph) -> int:
    """Evaluate nodes whose inputs are all weights (or empty, or of which only the static shape is read): the
    shape subgraphs of exported models (Shape, Gather, Concat, Cast, Range, ConstantOfShape, Unsqueeze, ...)
    become weights; return how many nodes were evaluated."""
    kept: list[Node] = []
    folded = 0
    for node in g.nodes:
        values = folded_values(g, node) if is_foldable(g, node) else None
        if values is None:
            kept.append(node)
            continue
        for out, value in zip(node.outputs, values):
            if out:
                t = g.tensors[out]
                g.weights[out] = np.asarray(np.asarray(value).astype(t.dtype).reshape(t.shape), order="C")
                t.kind = "weight"
        folded += 1
    g.nodes = kept
    if folded:
        g.notes.append(f"constant folding: {folded} node(s) evaluated at compile time")
    return folded


def folded_values(g: Graph, node: Node) -> list[np.ndarray] | None:
    """The outputs of a foldable node, or None when the evaluator rejects its inputs (the node then stays)."""
    if node.op_type in SHAPE_ONLY_OPS:
        return shape_only(g, node)
    inputs = [None if not n else g.constant(n) if g.is_constant(n) else np.zeros(g.tensors[n].shape,
                                                                              g.tensors[n].dtype)
              for n in node.inputs]
    try:
        return evaluate(g, node, inputs)
    except SchedulerError:
        return None
    except (ValueError, TypeError, IndexError) as exc:  # the evaluator's own failure: the node runs as a kernel
        g.notes.append(f"constant folding: '{node.name}' ({node.op_type}) left to run: the evaluator failed "
                       f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
        return None


def is_foldable(g: Graph, node: Node) -> bool:
    """A node the evaluator can run now: every input constant or empty (an empty tensor has one value), every
    output empty, or only the input's shape is read; never a random generator."""
    if node.op_type in SHAPE_ONLY_OPS:
        return True
    if node.op_type in RANDOM_OPS or not can_evaluate(node.op_type):
        return False
    if all(g.tensors[n].size == 0 for n in present(node.outputs)):
        return True  # empty outputs hold no values, whatever the inputs are
    return all(g.is_constant(n) or g.tensors[n].size == 0 for n in present(node.inputs))


def shape_only(g: Graph, node: Node) -> list[np.ndarray]:
    """Shape/Size of a tensor whose static shape is known, without its value."""
    shape = g.tensors[node.inputs[0]].shape
    if node.op_type == "Size":
        return [np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)]
    start, end = node.attrs.get("start", 0), node.attrs.get("end", len(shape))
    return [np.array(shape, dtype=np.int64)[start:end]]


# ---- zero-copy views -------------------------------------------------------------------------------------
GEMM_OPS = ("MatMul", "Gemm", "FusedMatMul", "FusedGemm")  # read A and B through strides (kernel_corpus ops/gemm.py)
STRIDED_VIEW_OPS = VIEW_OPS + ("Transpose", "Slice", "Split")  # may become strided views of their input's buffer


def alias_views(g: Graph) -> int:
    """Turn shape-only ops and contiguous Slice/Split into aliases of their input's buffer, and a Transpose, an
    inner-axis Split/Slice (and the reshapes of such views) into strided views where every reader can take the
    strides (the GEMM kernels' A and B, directly or through more views; otherwise the copy stays). Return how many."""
    kept: list[Node] = []
    count = 0
    readers, producers = tensor_readers(g), g.producers()
    for node in g.nodes:
        views = None if g.is_strided(node.inputs[0] if node.inputs else "") else view_offsets(g, node)
        if views is None:
            strided = strided_views(g, node)
            if strided is not None and all(readable(g, out, v, readers) for out, v in zip(node.outputs, strided)):
                for out, v in zip(node.outputs, strided):
                    if out:
                        g.aliases[out] = v
            elif (written := written_view(g, node, readers, producers)) is not None:
                g.aliases[node.inputs[0]] = written
            else:
                kept.append(node)
                continue
            count += 1
            continue
        for out, offset in zip(node.outputs, views):
            if out:
                g.aliases[out] = View(node.inputs[0], offset)
        if node.op_type == "Dropout" and len(node.outputs) > 1 and node.outputs[1]:
            mask = node.outputs[1]  # nothing dropped: the mask is all true
            g.weights[mask] = np.ones(g.tensors[mask].shape, dtype=g.tensors[mask].dtype)
            g.tensors[mask].kind = "weight"
        count += 1
    g.nodes = kept
    return count


def tensor_readers(g: Graph) -> dict[str, list[tuple[Node, int]]]:
    """Each tensor name's readers by that very name: (node, input position)."""
    out: dict[str, list[tuple[Node, int]]] = {}
    for node in g.nodes:
        for i, name in enumerate(node.inputs):
            if name:
                out.setdefault(name, []).append((node, i))
    return out


def strided_views(g: Graph, node: Node, source: View | None = None) -> list[View] | None:
    """The views (of the buffer holding input 0) a Transpose, a Split, a unit- or positive-step Slice, or a
    reshape-like op of a strided view produce, when `node`'s input is laid out as `source` (default: as it is);
    None when the op is none of these or an output cannot be one view. A view whose layout is C order after all is
    returned as a plain (offset-only) View."""
    if node.op_type not in STRIDED_VIEW_OPS or not node.inputs or not node.inputs[0]:
        return None
    x = node.inputs[0]
    outs = node.outputs
    if any(out in g.inputs for out in outs) or g.tensors[x].size == 0:
        return None
    src = g.buffer_of(x) if source is None else source
    shape = g.tensors[x].shape
    strides = src.strides if src.strides is not None else contiguous_strides(shape)
    if node.op_type in VIEW_OPS:
        if src.strides is None or (node.op_type == "Reshape" and len(present(node.inputs)) != 2):
            return None  # C-ordered inputs are alias_views' offset-only views
        new = reshaped_strides(shape, strides, g.tensors[outs[0]].shape)
        return None if new is None else [layout_view(src.base, src.offset, g.tensors[outs[0]].shape, new)]
    if node.op_type == "Transpose":
        perm = node.attrs.get("perm", list(range(len(shape)))[::-1])
        return [layout_view(src.base, src.offset, g.tensors[outs[0]].shape, tuple(strides[p] for p in perm))]
    if node.op_type == "Slice":
        box = slice_box(g, node)
        if box is None or any(st <= 0 for st in box[1]):
            return None
        begin, steps = box
        offset = src.offset + sum(b * s for b, s in zip(begin, strides))
        return [layout_view(src.base, offset, g.tensors[outs[0]].shape,
                            tuple(s * st for s, st in zip(strides, steps)))]
    axis = node.attrs.get("axis", 0) % len(shape)
    views, start = [], 0
    for out in outs:
        if not out:
            return None
        views.append(layout_view(src.base, src.offset + start * strides[axis], g.tensors[out].shape, strides))
        start += g.tensors[out].shape[axis]
    return views


def layout_view(base: str, offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> View:
    """A view of `base` at `offset` with `strides`; an offset-only View when those strides are C order's (size-1
    dimensions' strides do not matter)."""
    c_order = all(d == 1 or s == c for d, s, c in zip(shape, strides, contiguous_strides(shape)))
    return View(base, offset) if c_order else View(base, offset, tuple(strides))


def reshaped_strides(shape: tuple[int, ...], strides: tuple[int, ...],
                     new_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides of `new_shape` over the same elements as a (shape, strides) view without a copy, or None where the
    reshape would merge dimensions that are not adjacent in memory. Size-1 dimensions get stride 0."""
    old = [(d, s) for d, s in zip(shape, strides) if d != 1]
    new = [d for d in new_shape if d != 1]
    if int(np.prod(shape, dtype=np.int64)) != int(np.prod(new_shape, dtype=np.int64)) or 0 in shape:
        return None
    got: list[int] = []
    i = j = 0
    while i < len(old) and j < len(new):
        i0, j0, po, pn = i, j, old[i][0], new[j]
        while po != pn:
            if po < pn:
                i += 1
                po *= old[i][0]
            else:
                j += 1
                pn *= new[j]
        if any(old[k][1] != old[k + 1][1] * old[k + 1][0] for k in range(i0, i)):
            return None
        step, group = old[i][1], []
        for k in range(j, j0 - 1, -1):
            group.append(step)
            step *= new[k]
        got += group[::-1]
        i, j = i + 1, j + 1
    it = iter(got)
    return tuple(0 if d == 1 else next(it) for d in new_shape)


def readable(g: Graph, name: str, view: View, readers: dict[str, list[tuple[Node, int]]]) -> bool:
    """Whether every reader of `name` can read it laid out as `view`: always for an offset-only view; for a strided
    one, only GEMM operands A and B that some GEMM binding takes with those strides, or ops that are strided views
    again (all of whose readers can read those), and never a graph output or a tensor something already aliases."""
    if view.strides is None:
        return True
    if name in g.outputs or any(v.base == name for v in g.aliases.values()):
        return False
    for node, i in readers.get(name, []):
        if node.op_type in GEMM_OPS and i in (0, 1):
            if not gemm_takes(g, node, "inputs", i, view):
                return False
            continue
        outs = strided_views(g, node, view) if i == 0 else None
        if outs is None or not all(readable(g, out, v, readers) for out, v in zip(node.outputs, outs)):
            return False
    return True


def written_view(g: Graph, node: Node, readers: dict[str, list[tuple[Node, int]]],
                 producers: dict[str, Node]) -> View | None:
    """For a Transpose that alone reads a GEMM's output x: x as a strided view of the Transpose's output buffer, which
    the GEMM then writes in that layout (its rows contiguous) so the copy goes; None where that is not possible."""
    if node.op_type != "Transpose" or not node.inputs or not node.inputs[0]:
        return None
    x, y = node.inputs[0], node.outputs[0]
    writer = producers.get(x)
    if (writer is None or writer.op_type not in GEMM_OPS or writer.outputs[0] != x or readers.get(x) != [(node, 0)]
            or {x, y} & (set(g.inputs) | set(g.outputs) | set(g.aliases))
            or any(v.base == x for v in g.aliases.values())):
        return None
    shape = g.tensors[x].shape
    strides = [0] * len(shape)
    for k, (p, s) in enumerate(zip(node.attrs.get("perm", list(range(len(shape)))[::-1]),
                                   contiguous_strides(g.tensors[y].shape))):
        strides[p] = s
    view = layout_view(y, 0, shape, tuple(strides))
    return view if view.strides is None or gemm_takes(g, writer, "outputs", 0, view) else None


def gemm_takes(g: Graph, node: Node, role: str, i: int, view: View) -> bool:
    """Whether a GEMM binding of the default corpus runs `node` with its input or output (`role`) i laid out as
    `view`."""
    from kernel_corpus.bindings import TensorInfo, registry
    from .workload import node_info
    info = node_info(g, node)
    tensors = getattr(info, role)
    t = tensors[i]
    assert t is not None
    tensors[i] = TensorInfo(t.shape, t.dtype, view.strides)
    return any(b.applies(info) for b in registry.for_op(node.op_type))


def deterministic_dropout(g: Graph, node: Node) -> bool:
    """A Dropout that drops nothing: inference (training_mode absent or constant false) or a constant ratio 0."""
    ins = node.inputs + [""] * (3 - len(node.inputs))
    training = bool(node.attrs.get("training_mode", 0))  # opset < 12 had no such input
    if ins[2]:
        if not g.is_constant(ins[2]):
            return False
        training = bool(g.constant(ins[2]).reshape(-1)[0])
    if not training:
        return True
    ratio = g.constant(ins[1]).reshape(-1)[0] if ins[1] and g.is_constant(ins[1]) else (0.5 if not ins[1] else None)
    return ratio is not None and float(ratio) == 0.0


def view_offsets(g: Graph, node: Node) -> list[int] | None:
    """Element offset of each output inside the input buffer when `node` only reinterprets it, else None."""
    if any(out in g.inputs for out in node.outputs):
        return None
    if node.op_type in VIEW_OPS:
        return [0]
    if node.op_type == "Dropout":
        return [0] if deterministic_dropout(g, node) else None
    if node.op_type == "Cast":  # to its own type: nothing changes
        return [0] if g.tensors[node.inputs[0]].dtype == g.tensors[node.outputs[0]].dtype else None
    if node.op_type == "Slice":
        return slice_offset(g, node)
    if node.op_type == "Split":
        return split_offsets(g, node)
    return None


def region_offset(shape: tuple[int, ...], begin: list[int], out_shape: tuple[int, ...]) -> int | None:
    """Offset of a box [begin, begin+out_shape) of a C-ordered array when that box is one contiguous range."""
    partial = [a for a in range(len(shape)) if out_shape[a] != shape[a]]
    if partial:
        k = partial[0]
        if any(out_shape[a] != 1 for a in range(k)) or any(a > k for a in partial):
            return None
    strides = [int(np.prod(shape[a + 1:], dtype=np.int64)) for a in range(len(shape))]
    return sum(b * s for b, s in zip(begin, strides))


def slice_offset(g: Graph, node: Node) -> list[int] | None:
    """A unit-step Slice with constant bounds whose result is a contiguous range of its input."""
    box = slice_box(g, node)
    if box is None or any(st != 1 for st in box[1]):
        return None
    offset = region_offset(g.tensors[node.inputs[0]].shape, box[0], g.tensors[node.outputs[0]].shape)
    return None if offset is None else [offset]


def slice_box(g: Graph, node: Node) -> tuple[list[int], list[int]] | None:
    """(first index, step) per axis of a Slice with constant bounds, or None when they are not constant."""
    ins = node.inputs + [""] * (5 - len(node.inputs))
    if not all(g.is_constant(n) for n in present(ins[1:])):
        return None
    shape = g.tensors[ins[0]].shape
    starts, ends = g.constant(ins[1]), g.constant(ins[2])
    axes = g.constant(ins[3]) if ins[3] else range(len(starts))
    steps = g.constant(ins[4]) if ins[4] else [1] * len(starts)
    begin, step = [0] * len(shape), [1] * len(shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = int(a) % len(shape)
        if int(st) == 0:
            return None
        begin[a] = slice(int(s), int(e), int(st)).indices(shape[a])[0]
        step[a] = int(st)
    return begin, step


def split_offsets(g: Graph, node: Node) -> list[int] | None:
    """A Split whose every piece is a contiguous range of its input (splitting the outermost non-unit axis)."""
    shape = g.tensors[node.inputs[0]].shape
    axis = node.attrs.get("axis", 0) % len(shape)
    offsets, start = [], 0
    for out in node.outputs:
        out_shape = g.tensors[out].shape if out else None
        if out_shape is None:
            return None
        begin = [0] * len(shape)
        begin[axis] = start
        offset = region_offset(shape, begin, out_shape)
        if offset is None:
            return None
        offsets.append(offset)
        start += out_shape[axis]
    return offsets


def add_view(g: Graph, src: str, shape: tuple[int, ...], stem: str, offset: int = 0,
             producers: dict[str, Node] | None = None) -> str:
    """A new tensor that is a view of `src` with another shape (and an element offset); returns its name."""
    name = g.add_tensor(stem, shape, g.tensors[src].dtype)
    base = g.buffer_of(src)
    if base.strides is not None:  # alias_views makes a strided view only where GEMM operands alone read it
        raise SchedulerError(f"an offset view of '{src}', which is a strided view")
    producers = g.producers() if producers is None else producers
    g.aliases[name] = resolve_concat_view(g, View(base.base, base.offset + offset), g.tensors[name].size,
                                          producers)
    return name


def resolve_concat_view(g: Graph, view: View, size: int, producers: dict[str, Node]) -> View:
    """A view that lies inside one piece of a contiguous Concat reads that piece, not the whole Concat."""
    producer = producers.get(view.base)
    if producer is None or producer.op_type != "Concat":
        return view
    shape = g.tensors[view.base].shape
    axis = producer.attrs["axis"] % len(shape)
    if any(d != 1 for d in shape[:axis]):
        return view  # pieces are not contiguous ranges of the output
    start = 0
    for piece in present(producer.inputs):
        n = g.tensors[piece].size
        if start <= view.offset and view.offset + size <= start + n:
            inner = g.buffer_of(piece)
            return resolve_concat_view(g, View(inner.base, inner.offset + view.offset - start), size, producers)
        start += n
    return view


# ---- BatchNormalization folding ----------------------------------------------------------------------------
def fold_batchnorm(g: Graph) -> int:
    """Fold inference BatchNormalization into the Conv or Gemm that alone feeds it; return how many."""
    producers = g.producers()
    consumers, viewed = g.consumers(), viewed_bases(g)
    removed: set[int] = set()
    for bn in g.nodes:
        if bn.op_type != "BatchNormalization" or len(present(bn.outputs)) != 1 or bn.attrs.get("training_mode", 0):
            continue
        src = bn.inputs[0]
        prev = producers.get(src)
        if prev is None or prev.op_type not in ("Conv", "Gemm") or sole_reader(g, src, consumers, viewed) is not bn:
            continue
        if not all(g.is_constant(n) for n in bn.inputs[1:5]):
            continue
        if not all(g.is_constant(n) for n in present(prev.inputs[1:])):
            continue
        scale, bias, mean, var = (g.constant(n).astype(np.float64) for n in bn.inputs[1:5])
        s = scale / np.sqrt(var + bn.attrs.get("epsilon", 1e-5))
        (fold_into_conv if prev.op_type == "Conv" else fold_into_gemm)(g, prev, s, bias - mean * s)
        del g.tensors[src]
        prev.outputs[0] = bn.outputs[0]
        removed.add(id(bn))
    g.nodes = [n for n in g.nodes if id(n) not in removed]
    if removed:
        g.notes.append(f"BatchNormalization folded into its producer: {len(removed)} node(s)")
    return len(removed)


def set_input(g: Graph, node: Node, index: int, value: np.ndarray, stem: str) -> None:
    """Point input `index` of `node` at a new weight holding `value` (dtype of the old input kept)."""
    dtype = g.tensors[node.inputs[1]].dtype
    name = g.add_weight(stem, np.asarray(value, dtype=dtype))
    while len(node.inputs) <= index:
        node.inputs.append("")
    node.inputs[index] = name


def fold_into_conv(g: Graph, conv: Node, s: np.ndarray, shift: np.ndarray) -> None:
    """W' = W*s per output channel, b' = b*s + (beta - mean*s)."""
    w = g.constant(conv.inputs[1]).astype(np.float64)
    b = g.constant(conv.inputs[2]).astype(np.float64) if len(conv.inputs) > 2 and conv.inputs[2] else 0.0
    set_input(g, conv, 1, w * s.reshape(-1, *([1] * (w.ndim - 1))), f"{conv.name}/W_bn")
    set_input(g, conv, 2, b * s + shift, f"{conv.name}/B_bn")


def fold_into_gemm(g: Graph, gemm: Node, s: np.ndarray, shift: np.ndarray) -> None:
    """Scale the output columns of op(B) by s; C' = beta*C*s + shift (beta becomes 1)."""
    w = g.constant(gemm.inputs[1]).astype(np.float64)
    w = w * s.reshape(-1, 1) if gemm.attrs.get("transB", 0) else w * s.reshape(1, -1)
    has_c = len(gemm.inputs) > 2 and gemm.inputs[2]
    c = g.constant(gemm.inputs[2]).astype(np.float64) * gemm.attrs.get("beta", 1.0) if has_c else 0.0
    set_input(g, gemm, 1, w, f"{gemm.name}/W_bn")
    set_input(g, gemm, 2, np.asarray(c * s + shift), f"{gemm.name}/C_bn")
    gemm.attrs["beta"] = 1.0


# ---- folding a node into its producer -------------------------------------------------------------------------
# ---- MatMul epilogues ----------------------------------------------------------------------------------------
def fuse_matmul_epilogues(g: Graph) -> int:
    """Fold the Mul/Div by a constant scalar and then the constant Add (a bias or a mask) that alone follow a
    MatMul into one FusedMatMul (Y = alpha * A @ B + C): fewer operators and fewer barrier-rTasks; return how many."""
    consumers, viewed = g.consumers(), viewed_bases(g)
    removed: set[int] = set()
    count = 0
    for node in g.nodes:
        if node.op_type != "MatMul" or len(present(node.inputs)) != 2 or g.tensors[node.outputs[0]].dtype != "float32":
            continue
        alpha, bias, out, chain = 1.0, "", node.outputs[0], []
        while (nxt := sole_reader(g, out, consumers, viewed)) is not None:
            scale = None if bias else epilogue_scale(g, nxt, out)
            if scale is not None:
                alpha *= scale
            elif not bias and nxt.op_type == "Add" and (c := epilogue_bias(g, nxt, out)):
                bias = c
            else:
                break
            chain.append(nxt)
            out = nxt.outputs[0]
        if not chain:
            continue
        for dead in [node.outputs[0]] + [n.outputs[0] for n in chain[:-1]]:
            del g.tensors[dead]
        node.op_type, node.inputs, node.outputs = "FusedMatMul", node.inputs[:2] + [bias], [out]
        node.attrs = {"alpha": alpha}
        removed |= {id(n) for n in chain}
        count += 1
    g.nodes = [n for n in g.nodes if id(n) not in removed]
    if count:
        g.notes.append(f"MatMul epilogues (scale, bias) fused into FusedMatMul: {count} node(s), "
                       f"{len(removed)} operator(s) removed")
    return count


def epilogue_scale(g: Graph, node: Node, y: str) -> float | None:
    """s for y * s, s * y or y / s with a constant scalar s (the caller multiplies alpha by it), else None."""
    if node.op_type not in ("Mul", "Div") or len(present(node.inputs)) != 2:
        return None
    other = node.inputs[1] if node.inputs[0] == y else node.inputs[0]
    if node.op_type == "Div" and node.inputs[0] != y or other == y or not g.is_constant(other):
        return None
    value = g.constant(other)
    if value.size != 1 or g.tensors[node.outputs[0]].shape != g.tensors[y].shape:
        return None
    s = float(value.reshape(-1)[0])
    if node.op_type == "Mul":
        return s
    return 1.0 / s if s != 0.0 else None


def epilogue_bias(g: Graph, node: Node, y: str) -> str:
    """The constant C of y + C (either order) when it broadcasts into y's trailing [M, N] only, else ''."""
    if len(present(node.inputs)) != 2:
        return ""
    other = node.inputs[1] if node.inputs[0] == y else node.inputs[0]
    if other == y or not g.is_constant(other) or g.tensors[other].dtype != "float32":
        return ""
    if g.tensors[node.outputs[0]].shape != g.tensors[y].shape:
        return ""
    shape = g.tensors[y].shape
    rows, cols = (shape[-2] if len(shape) > 1 else 1), shape[-1]
    c = tuple(g.tensors[other].shape)
    while len(c) > 2 and c[0] == 1:
        c = c[1:]
    if len(c) > 2:
        return ""
    c = (1, 1, *c)[-2:]
    return other if c[0] in (1, rows) and c[1] in (1, cols) else ""


FUSED_HOST = {"MatMul": "FusedMatMul", "FusedMatMul": "FusedMatMul", "Gemm": "FusedGemm", "Conv": "FusedConv"}
ACTIVATION_HOSTS = {"Relu": {"MatMul", "FusedMatMul", "Gemm", "Conv"}, "Gelu": {"MatMul", "FusedMatMul", "Gemm"}}


def fuse_activations(g: Graph, supports: Callable[[str], bool] | None = None) -> int:
    """Fold a Relu (after a MatMul/FusedMatMul/Gemm/Conv) or a Gelu (after a MatMul/FusedMatMul/Gemm) that alone
    reads its producer's output into the producer's epilogue: attribute activation (and Gelu's approximate) on
    FusedMatMul/FusedGemm/FusedConv; return how many."""
    consumers, viewed = g.consumers(), viewed_bases(g)
    implemented = {f for f in set(FUSED_HOST.values()) if supports is None or supports(f)}
    removed: set[int] = set()
    for node in g.nodes:
        fused = FUSED_HOST.get(node.op_type)
        if fused not in implemented or node.attrs.get("activation"):
            continue
        out = node.outputs[0]
        act = sole_reader(g, out, consumers, viewed)
        if act is None or node.op_type not in ACTIVATION_HOSTS.get(act.op_type, ()) or act.inputs[0] != out:
            continue
        if g.tensors[out].dtype != "float32":
            continue
        if node.op_type == "MatMul":
            node.attrs = {"alpha": 1.0}
            node.inputs = node.inputs[:2] + [""]
        node.op_type = fused
        node.attrs["activation"] = act.op_type
        if "approximate" in act.attrs:
            node.attrs["approximate"] = act.attrs["approximate"]
        del g.tensors[out]
        node.outputs = [act.outputs[0]]
        removed.add(id(act))
    g.nodes = [n for n in g.nodes if id(n) not in removed]
    if removed:
        g.notes.append(f"activations (Relu, Gelu) fused into the producing MatMul/Gemm/Conv: {len(removed)} node(s)")
    return len(removed)


# ---- dead nodes ----------------------------------------------------------------------------------------------
def remove_dead(g: Graph) -> int:
    """Drop nodes, weights, aliases and tensors that no graph output depends on; return nodes removed."""
    live: set[str] = set()
    for name in g.outputs:
        mark_live(g, name, live)
    kept_rev: list[Node] = []
    for node in reversed(g.nodes):
        if any(out in live or out in g.aliases and g.buffer_of(out).base in live for out in present(node.outputs)):
            kept_rev.append(node)
            for name in present(node.inputs) + present(node.outputs):  # outputs: the hops to a buffer written into
                mark_live(g, name, live)
    removed = len(g.nodes) - len(kept_rev)
    g.nodes = kept_rev[::-1]
    used = live | {o for n in g.nodes for o in present(n.outputs)} | set(g.inputs)
    g.aliases = {k: v for k, v in g.aliases.items() if k in used}
    g.weights = {k: v for k, v in g.weights.items() if k in used}
    g.tensors = {k: v for k, v in g.tensors.items() if k in used}
    if removed:
        g.notes.append(f"dead-node removal: {removed} node(s)")
    return removed


def mark_live(g: Graph, name: str, live: set[str]) -> None:
    """Mark a tensor and every alias hop down to its buffer as live."""
    while True:
        live.add(name)
        if name not in g.aliases:
            return
        name = g.aliases[name].base


# ---- LSTM unrolling --------------------------------------------------------------------------------------------
def expand_nodes(g: Graph, expand: Callable[[Node], list[Node] | None], what: str) -> int:
    """Replace, in order, each node that `expand` rewrites (it returns the nodes that compute it; None leaves the
    node as it is) and note how many; while `expand` runs, g.nodes holds everything before the node (earlier
    rewrites included), so producers() sees the node's inputs. The unrolling and RNN-splitting passes share it."""
    out: list[Node] = []
    count = 0
    for node in g.nodes:
        g.nodes = out + [node]
        nodes = expand(node)
        if nodes is None:
            out.append(node)
        else:
            out.extend(nodes)
            count += 1
    g.nodes = out
    if count:
        g.notes.append(f"{what}: {count} node(s)")
    return count


def unroll_lstm(g: Graph) -> int:
    """Replace each ONNX LSTM by one fused LSTMCell operator per step (with peepholes, which the cell lacks, by
    per-step standard operators); return how many."""
    def expand(node: Node) -> list[Node] | None:
        if node.op_type != "LSTM":
            return None
        peepholes = len(node.inputs) > 7 and node.inputs[7] and not lstm_problems(g, node, peepholes_ok=True)
        return (PeepholeLstmUnroller if peepholes else LstmUnroller)(g, node).run()
    return expand_nodes(g, expand, "LSTM unrolled into per-step operators")


def full_sequences(g: Graph, x: str, lens: str, layout: int = 0) -> bool:
    """No sequence_lens, or constant ones that all equal the number of steps: nothing to mask."""
    if not lens:
        return True
    steps = g.tensors[x].shape[1 if layout else 0]
    return g.is_constant(lens) and bool(np.all(g.constant(lens) == steps))


def check_lstm(g: Graph, node: Node) -> None:
    """Refuse the LSTM variants the unroller does not implement, naming the node."""
    problems = lstm_problems(g, node)
    if problems:
        raise SchedulerError(f"LSTM node '{node.name}': unsupported {', '.join(problems)} "
                             "(only forward, layout 0, default activations, constant weights)")


def lstm_problems(g: Graph, node: Node, peepholes_ok: bool = False) -> list[str]:
    """What of an LSTM node the unrollers do not implement (peepholes: only the standard-op lowering)."""
    a = node.attrs
    problems = []
    if a.get("direction", "forward") != "forward":
        problems.append(f"direction={a['direction']}")
    if a.get("layout", 0) != 0:
        problems.append("layout=1")
    if a.get("activations", ["Sigmoid", "Tanh", "Tanh"]) != ["Sigmoid", "Tanh", "Tanh"]:
        problems.append(f"activations={a['activations']}")
    if "clip" in a:
        problems.append("clip")
    if a.get("input_forget", 0):
        problems.append("input_forget=1")
    ins = node.inputs + [""] * (8 - len(node.inputs))
    if not full_sequences(g, ins[0], ins[4]):
        problems.append("sequence_lens")
    if ins[7] and not (peepholes_ok and g.is_constant(ins[7])):
        problems.append("peepholes P")
    if not all(g.is_constant(n) for n in present(ins[1:4])):
        problems.append("non-constant W/R/B")
    return problems


class LstmUnroller:
    """Builds the per-step operators of one forward LSTM node."""

    def __init__(self, g: Graph, node: Node) -> None:
        check_lstm(g, node)
        self.g, self.node = g, node
        ins = node.inputs + [""] * (8 - len(node.inputs))
        self.x, self.init_h, self.init_c = ins[0], ins[5], ins[6]
        self.steps, self.batch, self.isize = g.tensors[self.x].shape
        w = g.constant(ins[1])[0]
        r = g.constant(ins[2])[0]
        self.hidden = int(node.attrs.get("hidden_size", r.shape[1]))
        self.dtype = g.tensors[self.x].dtype
        self.wt = g.add_weight(f"{node.name}/Wt", w.T.astype(self.dtype))
        self.rt = g.add_weight(f"{node.name}/Rt", r.T.astype(self.dtype))
        h4 = 4 * self.hidden
        self.bias = g.add_weight(f"{node.name}/bias", (g.constant(ins[3])[0][:h4] + g.constant(ins[3])[0][h4:])
                                 .astype(self.dtype)) if ins[3] else ""
        self.new_nodes: list[Node] = []
        self.producers = g.producers()  # of the nodes before this LSTM: what its input views may resolve into

    def view(self, src: str, shape: tuple[int, ...], stem: str, offset: int = 0) -> str:
        """A view of `src` (through the producers before this LSTM)."""
        return add_view(self.g, src, shape, f"{self.node.name}/{stem}", offset, self.producers)

    def emit(self, op_type: str, inputs: list[str], shapes: list[tuple[int, ...]], stem: str) -> list[str]:
        """Append a node with fresh output tensors and return their names."""
        outs = [self.g.add_tensor(f"{self.node.name}/{stem}{k or ''}", s, self.dtype) for k, s in enumerate(shapes)]
        self.new_nodes.append(Node(f"{self.node.name}/{stem}", op_type, inputs, outs))
        return outs

    def step_inputs(self) -> list[str] | None:
        """Per-step [B, I] inputs when every step of X is its own producer's piece (stacked LSTMs), else None."""
        piece = self.batch * self.isize
        views = [self.view(self.x, (self.batch, self.isize), f"x{t}", t * piece) for t in range(self.steps)]
        bases = {self.g.buffer_of(v).base for v in views}
        if len(bases) == self.steps and self.g.buffer_of(self.x).base not in bases:
            return views
        for v in views:
            del self.g.aliases[v], self.g.tensors[v]
        return None

    def input_terms(self) -> list[tuple[str, str, str]]:
        """(x, Wt, pre) of each step's cell: the step's view of one hoisted x·Wᵀ + b over all steps as `pre`,
        or, when steps come separately (stacked LSTMs), x_t and Wᵀ with the bias as `pre`."""
        per_step = self.step_inputs()
        if per_step is not None:
            return [(xt, self.wt, self.bias) for xt in per_step]
        h4, rows = 4 * self.hidden, self.steps * self.batch
        x2d = self.view(self.x, (rows, self.isize), "x2d")
        (xw,) = self.emit("MatMul", [x2d, self.wt], [(rows, h4)], "xw")
        if self.bias:
            (xw,) = self.emit("Add", [xw, self.bias], [(rows, h4)], "xwb")
        return [("", "", self.view(xw, (self.batch, h4), f"xw{t}", t * self.batch * h4)) for t in range(self.steps)]

    def run(self) -> list[Node]:
        """Emit one LSTMCell per step (absent terms: no x at hoisted steps, no h before the first state) and
        wire Y (Concat of step views), Y_h and Y_c (aliases)."""
        g, b, h = self.g, self.batch, self.hidden
        h_prev = self.view(self.init_h, (b, h), "h_init") if self.init_h else ""
        if self.init_c:
            c_prev = self.view(self.init_c, (b, h), "c_init")
        else:
            c_prev = g.add_weight(f"{self.node.name}/c_zero", np.zeros((b, h), dtype=self.dtype))
        hs: list[str] = []
        for t, (x, wt, pre) in enumerate(self.input_terms()):
            inputs = [x, wt, h_prev, self.rt if h_prev else "", pre, c_prev]
            h_prev, c_prev = self.emit("LSTMCell", inputs, [(b, h), (b, h)], f"t{t}/cell")
            hs.append(h_prev)
        self.wire_outputs(hs, c_prev)
        return self.new_nodes

    def wire_outputs(self, hs: list[str], c_last: str) -> None:
        """Y = Concat over steps of [1,1,B,H] views of h_t; Y_h, Y_c = views of the last h and c."""
        outs = self.node.outputs + [""] * (3 - len(self.node.outputs))
        y, y_h, y_c = outs[:3]
        if y:
            pieces = [add_view(self.g, ht, (1, 1, self.batch, self.hidden), f"{ht}/as_y", 0, self.producers)
                      for ht in hs]
            self.new_nodes.append(Node(f"{self.node.name}/Y", "Concat", pieces, [y], {"axis": 0}))
        if y_h:
            self.g.aliases[y_h] = View(hs[-1])
        if y_c:
            self.g.aliases[y_c] = View(c_last)


# ---- weight-stationary recurrent layers (docs/ARCHITECTURE.md §7) ----------------------------------------------
# A target pass: the slices are sized for the Target's vEUs per SM (Target.resident_budget, vdevice/target.py, where
# the shared-memory figures and the headroom policy live) and packed while its vEUs last.
def resident_weights(g: Graph, target: Target) -> int:
    """Give each family of batch-1 LSTMCell steps that share their weight initializers (the unrolled steps of one
    layer) one packed weight tensor P (input 6; kernel_corpus.ops.rnn.pack_lstm_weights) sized so a slice fits a
    vEU's shared memory, and mark the steps `family` (P's name) and `family_head` (the first step, which loads
    the slices); the scheduler pins each family's rTasks to the same vEUs. Families whose layout differs between
    steps, or whose slices cannot fit, keep the streaming cells, and so do the families (the later layers) for
    which the target's vEUs (resident_veus) run out: each pinned rTask needs a vEU of its own. Slices are sized for
    the target's vEUs per SM (Target.resident_budget). Returns how many families were packed."""
    count, left = 0, resident_veus(target)
    for members in lstm_families(g):
        packed = (family_packing(g, members, target.resident_budget, target.resident_units) if len(members) > 1
                  else None)
        if packed is None:
            continue
        if left is not None and packed.shape[0] > left:
            g.notes.append(f"resident_weights: '{members[0].name}' and its {len(members) - 1} later steps stream "
                           f"their weights: their {packed.shape[0]} resident slices need as many vEUs, {left} left")
            continue
        left = None if left is None else left - packed.shape[0]
        name = g.add_weight(f"{members[0].name}/packed", packed)
        for k, node in enumerate(members):
            node.inputs = node.inputs + [""] * (PACKED_INPUT - len(node.inputs)) + [name]
            node.attrs = {**node.attrs, "family": name, "family_head": int(k == 0)}
        count += 1
    return count


PACKED_INPUT = 6  # LSTMCell input: the packed weights (kernel_corpus.ops.rnn.PACKED)


def resident_veus(target: Target) -> int | None:
    """The vEUs resident families may take: all the target's (None: no limit)."""
    return target.veus


def lstm_families(g: Graph) -> list[list[Node]]:
    """Batch-1 LSTMCell nodes grouped by shared weight inputs (Wt, Rt, a constant [4H] pre), in node order."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    cells = [n for n in g.nodes if n.op_type == "LSTMCell" and len(n.inputs) == PACKED_INPUT and n.inputs[5]
             and g.tensors[n.inputs[5]].shape[0] == 1]
    for n in cells:
        keys = [g.buffer_of(t).base for t in n.inputs[1:5] if t and g.is_constant(t)]
        for k in keys[1:]:
            parent[root(k)] = root(keys[0])
    groups: dict[str, list[Node]] = {}
    for n in cells:
        keys = [g.buffer_of(t).base for t in n.inputs[1:5] if t and g.is_constant(t)]
        if keys:
            groups.setdefault(root(keys[0]), []).append(n)
    return list(groups.values())


def family_packing(g: Graph, members: list[Node], budget: int, cap: int = 0) -> np.ndarray | None:
    """P for one family, or None when its steps disagree (two Wt, x on some steps only, a bias on some steps only)
    or its slices do not fit `budget` bytes of a vEU's shared memory; J at most `cap` hidden units (0: no cap)."""
    from kernel_corpus.ops.rnn import pack_lstm_weights, resident_units
    ins = [n.inputs for n in members]  # x, Wt, h_prev, Rt, pre, c_prev (lstm_families)
    wts, rts = {i[1] for i in ins}, {i[3] for i in ins if i[3]}
    biases = {i[4] if i[4] and g.is_constant(i[4]) and len(g.tensors[i[4]].shape) == 1 else "" for i in ins}
    if len(wts) != 1 or len(rts) > 1 or len(biases) != 1:
        return None
    wt, rt, bias = wts.pop(), (rts.pop() if rts else ""), biases.pop()
    hidden = g.tensors[ins[0][5]].shape[1]
    w, r, b = (g.constant(t) if t else None for t in (wt, rt, bias))
    rows = sum(a.shape[0] for a in (w, r) if a is not None)
    units = resident_units(rows, hidden, budget, cap)
    return None if units is None else pack_lstm_weights(w, r, b, hidden, units)


# The J choice (rammer.build): the build plans the fewest-fit J and at most this many lower caps, and keeps the plan
# predicted fastest; each is one more plan (~10 s at full-size LSTM-TC on this machine, an estimate).
J_CANDIDATES = 3


def packed_shapes(g: Graph) -> list[tuple[int, int]]:
    """(H, J) of each family the resident_weights pass packed in `g` (P [ceil(H/J), rows + 1, 4J] on its head)."""
    heads = [n for n in g.nodes if n.op_type == "LSTMCell" and n.attrs.get("family_head") == 1]
    return [(g.tensors[n.inputs[5]].shape[1], g.tensors[n.inputs[PACKED_INPUT]].shape[2] // 4) for n in heads]


def spread_blocks(shapes: list[tuple[int, int]], cap: int) -> int:
    """rTasks per step over all families when J is capped at `cap` (each family's J is the packed one, or less:
    resident_units evens J out without changing its block count, so ceil(H / min(J, cap)) is the count)."""
    return sum(-(-h // min(j, cap)) for h, j in shapes)


def resident_unit_caps(g: Graph, veus: int, most: int = J_CANDIDATES) -> list[int]:
    """The J caps (Target.resident_units) worth planning besides the fewest-fit J the pass packed `g` with
    (unit_caps of its families' shapes)."""
    return unit_caps(packed_shapes(g), veus, most)


def unit_caps(shapes: list[tuple[int, int]], veus: int, most: int = J_CANDIDATES) -> list[int]:
    """For families of (H, J) packed with their fewest-fit J: the lower J caps whose families still fit the vEUs
    side by side (rTasks per step over all families <= `veus`, so every family that pins now still pins), one cap
    per block count, at most `most` of them evenly spaced from the fewest-fit count to the widest spread (always
    included), largest cap first. No vEUs are held back for the plan's other work: it may queue on a pinned vEU
    between steps, and the simulation that prices each candidate charges that wait."""
    if not shapes or most < 1:
        return []
    base = spread_blocks(shapes, max(j for _, j in shapes))
    caps: dict[int, int] = {}  # block count -> the largest cap giving it
    for cap in range(max(j for _, j in shapes) - 1, 0, -1):
        blocks = spread_blocks(shapes, cap)
        if blocks > veus:
            break
        if blocks > base:
            caps.setdefault(blocks, cap)
    found = [caps[b] for b in sorted(caps)]
    if len(found) <= most:
        return found
    return sorted({found[round((i + 1) * (len(found) - 1) / most)] for i in range(most)}, reverse=True)


# ---- operands through float32 ----------------------------------------------------------------------------------
EXACT_IN_FLOAT = ("ReduceMax", "ReduceMin")  # ops whose bool operand computes exactly in float32


def float_operands(g: Graph) -> int:
    """Give float kernels operands they can read: a float Pow's integer exponent becomes float32 (a constant is
    converted now, a runtime one through a Cast); ReduceMax/ReduceMin over bool run in float32 between two Casts.
    Returns how many nodes changed."""
    out: list[Node] = []
    count = 0
    for node in g.nodes:
        t = [g.tensors[n].dtype if n else "" for n in node.inputs]
        if node.op_type == "Pow" and t[0] == "float32" and np.dtype(t[1]).kind in "iu":
            node.inputs[1] = as_float32(g, node.inputs[1], f"{node.name}/exponent", out)
            count += 1
        elif node.op_type in EXACT_IN_FLOAT and t[0] == "bool":
            node.inputs[0] = as_float32(g, node.inputs[0], f"{node.name}/as_float", out)
            y = node.outputs[0]
            node.outputs[0] = g.add_tensor(f"{y}/float", g.tensors[y].shape, "float32")
            out.append(node)
            out.append(Node(f"{node.name}/to_bool", "Cast", [node.outputs[0]], [y], {"to": 9}))
            count += 1
            continue
        out.append(node)
    g.nodes = out
    return count


def as_float32(g: Graph, name: str, stem: str, out: list[Node]) -> str:
    """`name` as float32: a converted weight for a constant, else the output of a Cast appended to `out`."""
    if g.is_constant(name):
        return g.add_weight(stem, g.constant(name).astype(np.float32))
    cast = g.add_tensor(stem, g.tensors[name].shape, "float32")
    out.append(Node(stem, "Cast", [name], [cast], {"to": 1}))
    return cast


# ---- MatMul batch broadcasting ---------------------------------------------------------------------------------------
def expand_matmul_batches(g: Graph) -> int:
    """A MatMul whose operands' batch dims broadcast partially ([3, 1] against [1, 2]) gets each such operand
    Expanded to the full batch first (the GEMM kernels take an operand with every batch or with none);
    return how many operands were expanded."""
    out: list[Node] = []
    count = 0
    for node in g.nodes:
        if node.op_type == "MatMul" and len(present(node.inputs)) == 2:
            count += expand_partial_batches(g, node, out)
        out.append(node)
    g.nodes = out
    return count


def expand_partial_batches(g: Graph, node: Node, out: list[Node]) -> int:
    """Expand (appended to `out`) each operand of `node` whose batch dims are neither all nor none of the output's."""
    shapes = [g.tensors[n].shape for n in node.inputs[:2]]
    if min(len(s) for s in shapes) < 2:
        return 0
    batch_rank = max(len(s) for s in shapes) - 2
    padded = [(1,) * (batch_rank + 2 - len(s)) + s for s in shapes]
    batch = tuple(max(a, b) for a, b in zip(padded[0][:batch_rank], padded[1][:batch_rank]))
    count = 0
    for k, shape in enumerate(padded):
        own = shape[:batch_rank]
        if own == batch or int(np.prod(own)) == 1:
            continue
        full = batch + shape[batch_rank:]
        if g.is_constant(node.inputs[k]):  # a weight is broadcast now
            node.inputs[k] = g.add_weight(f"{node.name}/expand{k}",
                                          np.broadcast_to(g.constant(node.inputs[k]).reshape(shape), full))
            count += 1
            continue
        target = g.add_weight(f"{node.name}/expand{k}_shape", np.array(full, dtype=np.int64))
        wide = g.add_tensor(f"{node.name}/expand{k}", full, g.tensors[node.inputs[k]].dtype)
        out.append(Node(f"{node.name}/expand{k}", "Expand", [node.inputs[k], target], [wide]))
        node.inputs[k] = wide
        count += 1
    return count


# ---- training-mode BatchNormalization ------------------------------------------------------------------------------
def lower_training_batchnorm(g: Graph) -> int:
    """Training-mode BatchNormalization as standard operators: batch mean and (population) variance by ReduceMean
    over every axis but the channels, Y normalised by them, and the running statistics blended by momentum;
    return how many nodes were lowered."""
    out: list[Node] = []
    count = 0
    for node in g.nodes:
        if node.op_type == "BatchNormalization" and node.attrs.get("training_mode", 0) and \
                len(present(node.inputs)) == 5:
            out.extend(TrainingBatchNorm(g, node).run())
            count += 1
        else:
            out.append(node)
    g.nodes = out
    return count


class TrainingBatchNorm:
    """The standard operators of one training-mode BatchNormalization node."""

    def __init__(self, g: Graph, node: Node) -> None:
        self.g, self.node = g, node
        self.shape = g.tensors[node.inputs[0]].shape
        self.C = self.shape[1]
        self.kept = (1, self.C) + (1,) * (len(self.shape) - 2)
        self.new: list[Node] = []

    def emit(self, op_type: str, inputs: list[str], shape: tuple[int, ...], stem: str, out: str = "",
             **attrs) -> str:
        """Append one node writing a fresh float32 tensor (or `out`)."""
        out = out or self.g.add_tensor(f"{self.node.name}/{stem}", shape, "float32")
        self.new.append(Node(f"{self.node.name}/{stem}", op_type, inputs, [out], attrs))
        return out

    def const(self, value: object, stem: str) -> str:
        """A float32 or int64 weight."""
        arr = np.asarray(value)
        return self.g.add_weight(f"{self.node.name}/{stem}", arr.astype(np.int64 if arr.dtype.kind in "iu"
                                                                         else np.float32))

    def mean(self, src: str, stem: str) -> str:
        """ReduceMean over every axis but the channels, kept."""
        axes = [0] + list(range(2, len(self.shape)))
        if self.g.opset >= 18:
            return self.emit("ReduceMean", [src, self.const(axes, f"{stem}_axes")], self.kept, stem, keepdims=1)
        return self.emit("ReduceMean", [src], self.kept, stem, axes=axes, keepdims=1)

    def reshaped(self, src: str, shape: tuple[int, ...], stem: str, out: str = "") -> str:
        """Reshape to a constant shape (a view once alias_views runs)."""
        return self.emit("Reshape", [src, self.const(list(shape), f"{stem}_shape")], shape, stem, out)

    def run(self) -> list[Node]:
        """Y, then the running mean and variance outputs that are asked for."""
        x, scale, bias, mean_in, var_in = self.node.inputs[:5]
        eps = self.const(float(self.node.attrs.get("epsilon", 1e-5)), "eps")
        momentum = float(self.node.attrs.get("momentum", 0.9))
        m = self.mean(x, "mean")
        d = self.emit("Sub", [x, m], self.shape, "centred")
        v = self.mean(self.emit("Mul", [d, d], self.shape, "sq"), "var")
        inv = self.emit("Reciprocal", [self.emit("Sqrt", [self.emit("Add", [v, eps], self.kept, "var_eps")],
                                                 self.kept, "std")], self.kept, "inv_std")
        scaled = self.emit("Mul", [self.emit("Mul", [d, inv], self.shape, "normed"),
                                   self.reshaped(scale, self.kept, "scale_r")], self.shape, "scaled")
        outs = self.node.outputs + [""] * (3 - len(self.node.outputs))
        self.emit("Add", [scaled, self.reshaped(bias, self.kept, "bias_r")], self.shape, "y", outs[0])
        keep, blend = self.const(momentum, "momentum"), self.const(1.0 - momentum, "blend")
        for out, running, batch, stem in ((outs[1], mean_in, m, "running_mean"), (outs[2], var_in, v, "running_var")):
            if out:
                flat = self.reshaped(batch, (self.C,), f"{stem}_batch")
                self.emit("Add", [self.emit("Mul", [running, keep], (self.C,), f"{stem}_old"),
                                  self.emit("Mul", [flat, blend], (self.C,), f"{stem}_new")], (self.C,), stem, out)
        return self.new


# ---- RNN directions and layouts -----------------------------------------------------------------------------------
RNN_OPS = ("LSTM", "GRU")


def split_rnn_directions(g: Graph) -> int:
    """Rewrite each LSTM/GRU that runs in reverse, both directions, or with layout=1 as forward, layout-0 nodes of
    one direction each: time reversed by Slice (step -1) before and after, batch-major tensors transposed, the
    directions' outputs concatenated; return how many nodes were rewritten."""
    def expand(node: Node) -> list[Node] | None:
        a = node.attrs
        lens = node.inputs[4] if len(node.inputs) > 4 else ""
        if node.op_type in RNN_OPS and (a.get("direction", "forward") != "forward" or a.get("layout", 0)) \
                and all(g.is_constant(n) for n in present(node.inputs[1:4])) \
                and full_sequences(g, node.inputs[0], lens, int(a.get("layout", 0))):
            return RnnSplitter(g, node).run()
        return None
    return expand_nodes(g, expand, "RNN directions/layouts split into forward layout-0 nodes")


class RnnSplitter:
    """Builds the forward, layout-0, one-direction nodes that compute one LSTM/GRU node."""

    def __init__(self, g: Graph, node: Node) -> None:
        self.g, self.node = g, node
        self.layout = int(node.attrs.get("layout", 0))
        self.direction = node.attrs.get("direction", "forward")
        self.dirs = ["forward", "reverse"] if self.direction == "bidirectional" else [self.direction]
        self.new: list[Node] = []
        self.producers = g.producers()

    def tensor(self, stem: str, shape: tuple[int, ...], dtype: str) -> str:
        """A fresh intermediate tensor named after the node."""
        return self.g.add_tensor(f"{self.node.name}/{stem}", shape, dtype)

    def emit(self, op_type: str, inputs: list[str], out: str, stem: str, **attrs) -> str:
        """Append one node writing `out`."""
        self.new.append(Node(f"{self.node.name}/{stem}", op_type, inputs, [out], attrs))
        return out

    def transposed(self, src: str, perm: list[int], stem: str) -> str:
        """Transpose of src by perm into a new tensor."""
        t = self.g.tensors[src]
        return self.emit("Transpose", [src], self.tensor(stem, tuple(t.shape[p] for p in perm), t.dtype), stem,
                         perm=perm)

    def reversed_time(self, src: str, stem: str, out: str | None = None) -> str:
        """src with its axis 0 (time) reversed: Slice with step -1."""
        t = self.g.tensors[src]
        steps = t.shape[0]
        consts = [self.g.add_weight(f"{self.node.name}/{stem}_{k}", np.array(v, dtype=np.int64))
                  for k, v in (("starts", [steps - 1]), ("ends", [-steps - 1]), ("axes", [0]), ("steps", [-1]))]
        return self.emit("Slice", [src] + consts, out or self.tensor(stem, t.shape, t.dtype), stem)

    def direction_slice(self, src: str, d: int, stem: str) -> str:
        """[1, ...] piece d of a [D, ...] state or weight tensor: a weight, or a view of the state."""
        if not src:
            return ""
        if self.g.is_constant(src):
            return self.g.add_weight(f"{self.node.name}/{stem}", np.asarray(self.g.constant(src)[d:d + 1], order="C"))
        t = self.g.tensors[src]
        piece = (1, *t.shape[1:])
        return add_view(self.g, src, piece, f"{self.node.name}/{stem}", d * int(np.prod(piece)), self.producers)

    def run(self) -> list[Node]:
        """The rewritten nodes, in order."""
        g, node = self.g, self.node
        ins = node.inputs + [""] * (8 - len(node.inputs))
        x, init_h = ins[0], ins[5]
        init_c = ins[6] if node.op_type == "LSTM" else ""
        if self.layout:
            x = self.transposed(x, [1, 0, 2], "x_tbi")
            init_h = self.transposed(init_h, [1, 0, 2], "h0_dbh") if init_h else ""
            init_c = self.transposed(init_c, [1, 0, 2], "c0_dbh") if init_c else ""
        steps, batch = g.tensors[x].shape[:2]
        hidden = int(node.attrs.get("hidden_size", g.tensors[ins[2]].shape[-1]))
        dtype = g.tensors[x].dtype
        ys, hs, cs = [], [], []
        for d, direction in enumerate(self.dirs):
            xd = self.reversed_time(x, f"x_rev{d}") if direction == "reverse" else x
            new_ins = [xd] + [self.direction_slice(ins[k], d, f"{name}{d}") for k, name in ((1, "W"), (2, "R"),
                                                                                          (3, "B"))]
            new_ins += ["", self.direction_slice(init_h, d, f"h0_{d}")]
            if node.op_type == "LSTM":
                new_ins += [self.direction_slice(init_c, d, f"c0_{d}"), ins[7] and self.direction_slice(ins[7], d,
                                                                                                        f"P{d}")]
            y = self.tensor(f"y{d}", (steps, 1, batch, hidden), dtype)
            yh = self.tensor(f"yh{d}", (1, batch, hidden), dtype)
            yc = self.tensor(f"yc{d}", (1, batch, hidden), dtype) if node.op_type == "LSTM" else ""
            attrs = {k: v for k, v in node.attrs.items() if k not in ("direction", "layout")}
            self.new.append(Node(f"{node.name}/dir{d}", node.op_type, new_ins, [y, yh] + ([yc] if yc else []),
                                 attrs))
            ys.append(self.reversed_time(y, f"y_fwd{d}") if direction == "reverse" else y)
            hs.append(yh)
            cs.append(yc)
        outs = node.outputs + [""] * (3 - len(node.outputs))
        for out, parts, axis, perm in ((outs[0], ys, 1, [2, 0, 1, 3]), (outs[1], hs, 0, [1, 0, 2]),
                                       (outs[2], cs, 0, [1, 0, 2])):
            if out and all(parts):
                self.combine(out, parts, axis, perm)
        return self.new

    def combine(self, out: str, parts: list[str], axis: int, perm: list[int]) -> None:
        """out = the directions' parts concatenated along `axis` (then transposed back for layout=1)."""
        t = self.g.tensors[out]
        shape = tuple(t.shape[p] for p in np.argsort(perm)) if self.layout else t.shape
        joined = self.tensor(f"{out}_tbd", shape, t.dtype) if self.layout else out
        if len(parts) == 1:
            self.g.aliases[joined] = View(parts[0])
        else:
            self.emit("Concat", parts, joined, f"{out}_concat", axis=axis)
        if self.layout:
            self.emit("Transpose", [joined], out, f"{out}_layout", perm=perm)


# ---- Einsum ---------------------------------------------------------------------------------------------------------
def lower_einsum(g: Graph) -> int:
    """Rewrite each Einsum of one or two operands without repeated labels as ReduceSum, Transpose, Reshape and one
    batched MatMul (batch labels, then free labels of each side, contracted labels inside); return how many."""
    out: list[Node] = []
    count = 0
    for node in g.nodes:
        terms = einsum_terms(g, node) if node.op_type == "Einsum" else None
        if terms is None:
            out.append(node)
            continue
        out.extend(EinsumLowering(g, node, *terms).run())
        count += 1
    g.nodes = out
    if count:
        g.notes.append(f"Einsum lowered to Transpose/ReduceSum/MatMul: {count} node(s)")
    return count


def einsum_terms(g: Graph, node: Node) -> tuple[list[str], str] | None:
    """The operands' label strings and the output's ('...' expanded to upper-case labels), or None when the
    equation repeats a label inside one operand (a diagonal) or has more than two operands."""
    eq = str(node.attrs.get("equation", "")).replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if not 1 <= len(terms) <= 2 or len(terms) != len(present(node.inputs)):
        return None
    ranks = [len(g.tensors[n].shape) for n in node.inputs]
    ell = max((r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t), default=0)
    fill = "".join(chr(ord("A") + i) for i in range(ell))
    expanded = []
    for t, r in zip(terms, ranks):
        t = t.replace("...", fill[ell - (r - len(t.replace("...", ""))):]) if "..." in t else t
        if len(t) != r or len(set(t)) != len(t):
            return None
        expanded.append(t)
    if not _:
        counts = {c: "".join(expanded).count(c) for c in "".join(expanded)}
        rhs = fill + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in fill))
    else:
        rhs = rhs.replace("...", fill)
    if len(set(rhs)) != len(rhs) or any(c not in "".join(expanded) for c in rhs):
        return None
    return expanded, rhs


class EinsumLowering:
    """The standard operators computing one Einsum."""

    def __init__(self, g: Graph, node: Node, terms: list[str], rhs: str) -> None:
        self.g, self.node, self.terms, self.rhs = g, node, terms, rhs
        self.dtype = g.tensors[node.inputs[0]].dtype
        self.new: list[Node] = []
        self.size = {c: d for t, n in zip(terms, node.inputs) for c, d in zip(t, g.tensors[n].shape)}

    def emit(self, op_type: str, inputs: list[str], shape: tuple[int, ...], stem: str, out: str = "",
             **attrs) -> str:
        """Append one node writing a fresh tensor (or `out`)."""
        out = out or self.g.add_tensor(f"{self.node.name}/{stem}", shape, self.dtype)
        self.new.append(Node(f"{self.node.name}/{stem}", op_type, inputs, [out], attrs))
        return out

    def reduce(self, src: str, labels: str, keep: str, stem: str) -> tuple[str, str]:
        """Sum away the labels of `labels` not in `keep`."""
        axes = [i for i, c in enumerate(labels) if c not in keep]
        if not axes:
            return src, labels
        left = "".join(c for c in labels if c in keep)
        shape = tuple(self.size[c] for c in left)
        if self.g.opset >= 13:
            ax = self.g.add_weight(f"{self.node.name}/{stem}_axes", np.array(axes, dtype=np.int64))
            return self.emit("ReduceSum", [src, ax], shape, stem, keepdims=0), left
        return self.emit("ReduceSum", [src], shape, stem, axes=axes, keepdims=0), left

    def arrange(self, src: str, labels: str, order: str, stem: str, out: str = "") -> str:
        """Transpose src (labelled `labels`) into `order` (a no-op order keeps src, unless `out` is asked for)."""
        if labels == order and not out:
            return src
        if labels == order:
            return self.emit("Identity", [src], (), stem, out)
        perm = [labels.index(c) for c in order]
        return self.emit("Transpose", [src], tuple(self.size[c] for c in order), stem, out, perm=perm)

    def reshaped(self, src: str, shape: tuple[int, ...], stem: str, out: str = "") -> str:
        """Reshape to a constant shape."""
        target = self.g.add_weight(f"{self.node.name}/{stem}_shape", np.array(shape, dtype=np.int64))
        return self.emit("Reshape", [src, target], shape, stem, out)

    def run(self) -> list[Node]:
        """One operand: reduce then transpose; two: reduce each, batched MatMul, reshape, transpose."""
        out, rhs = self.node.outputs[0], self.rhs
        if len(self.terms) == 1:
            src, labels = self.reduce(self.node.inputs[0], self.terms[0], rhs, "sum")
            self.arrange(src, labels, rhs, "out", out)
            return self.new
        (ta, tb), (a, b) = self.terms, self.node.inputs[:2]
        a, ta = self.reduce(a, ta, tb + rhs, "sum_a")
        b, tb = self.reduce(b, tb, ta + rhs, "sum_b")
        batch = "".join(c for c in ta if c in tb and c in rhs)
        contracted = "".join(c for c in ta if c in tb and c not in rhs)
        free_a = "".join(c for c in ta if c not in tb)
        free_b = "".join(c for c in tb if c not in ta)
        n = lambda labels: int(np.prod([self.size[c] for c in labels], dtype=np.int64))  # noqa: E731
        a3 = self.reshaped(self.arrange(a, ta, batch + free_a + contracted, "a_t"),
                           (n(batch), n(free_a), n(contracted)), "a3")
        b3 = self.reshaped(self.arrange(b, tb, batch + contracted + free_b, "b_t"),
                           (n(batch), n(contracted), n(free_b)), "b3")
        y3 = self.emit("MatMul", [a3, b3], (n(batch), n(free_a), n(free_b)), "mm")
        labels = batch + free_a + free_b
        y = self.reshaped(y3, tuple(self.size[c] for c in labels), "y",
                          out if labels == rhs else "")
        if labels != rhs:
            self.arrange(y, labels, rhs, "out", out)
        return self.new


# ---- GRU unrolling -------------------------------------------------------------------------------------------------
def unroll_gru(g: Graph) -> int:
    """Replace each forward GRU by per-step MatMul/Add/Sigmoid/Tanh/Mul/Sub operators; return how many."""
    return expand_nodes(g, lambda node: GruUnroller(g, node).run() if node.op_type == "GRU" else None,
                        "GRU unrolled into per-step operators")


def check_gru(g: Graph, node: Node) -> None:
    """Refuse the GRU variants the unroller does not implement, naming the node."""
    a = node.attrs
    problems = []
    if a.get("direction", "forward") != "forward" or a.get("layout", 0):
        problems.append(f"direction={a.get('direction', 'forward')} layout={a.get('layout', 0)} (split_rnn_directions "
                        "rewrites these)")
    if a.get("activations", ["Sigmoid", "Tanh"]) != ["Sigmoid", "Tanh"]:
        problems.append(f"activations={a['activations']}")
    if "clip" in a:
        problems.append("clip")
    ins = node.inputs + [""] * (6 - len(node.inputs))
    if not full_sequences(g, ins[0], ins[4]):
        problems.append("sequence_lens")
    if not all(g.is_constant(n) for n in present(ins[1:4])):
        problems.append("non-constant W/R/B")
    if problems:
        raise SchedulerError(f"GRU node '{node.name}': unsupported {', '.join(problems)} "
                             "(default activations, constant weights, no sequence_lens)")


class StepUnroller:
    """What the standard-op RNN unrollers share: hoisted x·Wᵀ + b per gate over all steps, per-step views, fresh
    operators, and Y / Y_h (/ Y_c) wired from the per-step states."""

    GATES = ""

    def __init__(self, g: Graph, node: Node, x_bias: np.ndarray) -> None:
        self.g, self.node = g, node
        ins = node.inputs + [""] * (8 - len(node.inputs))
        self.x, self.init_h = ins[0], ins[5]
        self.steps, self.batch, self.isize = g.tensors[self.x].shape
        w, r = g.constant(ins[1])[0], g.constant(ins[2])[0]
        self.hidden = H = int(node.attrs.get("hidden_size", r.shape[1]))
        self.dtype = g.tensors[self.x].dtype
        self.rt = [g.add_weight(f"{node.name}/R{k}t", r[i * H:(i + 1) * H].T.astype(self.dtype))
                   for i, k in enumerate(self.GATES)]
        self.new_nodes: list[Node] = []
        self.producers = g.producers()
        self.xw = self.hoisted(w, x_bias)

    def view(self, src: str, shape: tuple[int, ...], stem: str, offset: int = 0) -> str:
        """A view of `src` (through the producers before this node)."""
        return add_view(self.g, src, shape, f"{self.node.name}/{stem}", offset, self.producers)

    def emit(self, op_type: str, inputs: list[str], shape: tuple[int, ...], stem: str) -> str:
        """Append a node with one fresh output tensor and return its name."""
        out = self.g.add_tensor(f"{self.node.name}/{stem}", shape, self.dtype)
        self.new_nodes.append(Node(f"{self.node.name}/{stem}", op_type, inputs, [out]))
        return out

    def hoisted(self, w: np.ndarray, x_bias: np.ndarray) -> list[str]:
        """Per gate, x·Wᵀ + b over all steps as one MatMul and one Add ([T*B, H] each)."""
        T, B, H = self.steps, self.batch, self.hidden
        x2d = self.view(self.x, (T * B, self.isize), "x2d")
        out = []
        for i, k in enumerate(self.GATES):
            wt = self.g.add_weight(f"{self.node.name}/W{k}t", w[i * H:(i + 1) * H].T.astype(self.dtype))
            b = self.g.add_weight(f"{self.node.name}/b{k}", x_bias[i * H:(i + 1) * H].astype(self.dtype))
            out.append(self.emit("Add", [self.emit("MatMul", [x2d, wt], (T * B, H), f"xw{k}"), b], (T * B, H),
                                 f"xwb{k}"))
        return out

    def state(self, name: str, stem: str) -> str:
        """An initial state [1, B, H] as a [B, H] view, or zeros."""
        B, H = self.batch, self.hidden
        return self.view(name, (B, H), stem) if name else \
            self.g.add_weight(f"{self.node.name}/{stem}_zero", np.zeros((B, H), dtype=self.dtype))

    def step_inputs(self, t: int) -> list[str]:
        """Step t's [B, H] view of each hoisted gate term."""
        B, H = self.batch, self.hidden
        return [self.view(v, (B, H), f"{v.rsplit('/', 1)[-1]}_{t}", t * B * H) for v in self.xw]

    def wire_outputs(self, hs: list[str], c_last: str = "") -> None:
        """Y = Concat over steps of [1,1,B,H] views of h_t; Y_h (and Y_c) = views of the last state."""
        outs = self.node.outputs + [""] * (3 - len(self.node.outputs))
        if outs[0]:
            pieces = [add_view(self.g, h, (1, 1, self.batch, self.hidden), f"{h}/as_y", 0, self.producers)
                      for h in hs]
            self.new_nodes.append(Node(f"{self.node.name}/Y", "Concat", pieces, [outs[0]], {"axis": 0}))
        if outs[1]:
            self.g.aliases[outs[1]] = View(hs[-1])
        if outs[2] and c_last:
            self.g.aliases[outs[2]] = View(c_last)


class GruUnroller(StepUnroller):
    """Builds the per-step operators of one forward GRU node (gate order z, r, h as ONNX stores them)."""

    GATES = "zrh"

    def __init__(self, g: Graph, node: Node) -> None:
        check_gru(g, node)
        ins = node.inputs + [""] * (6 - len(node.inputs))
        H = int(node.attrs.get("hidden_size") or g.constant(ins[2]).shape[-1])
        b = g.constant(ins[3])[0] if ins[3] else np.zeros(6 * H)
        self.lbr = int(node.attrs.get("linear_before_reset", 0))
        wb, rb = b[:3 * H], b[3 * H:]
        super().__init__(g, node, wb + np.concatenate([rb[:2 * H], np.zeros(H) if self.lbr else rb[2 * H:]]))
        self.rbh = g.add_weight(f"{node.name}/Rbh", rb[2 * H:].astype(self.dtype)) if self.lbr else ""

    def run(self) -> list[Node]:
        """Per step the recurrence; Y, Y_h wired as for LSTM."""
        h = self.state(self.init_h, "h_init")
        hs = []
        for t in range(self.steps):
            h = self.step(t, h, self.step_inputs(t))
            hs.append(h)
        self.wire_outputs(hs)
        return self.new_nodes

    def step(self, t: int, h: str, xw: list[str]) -> str:
        """h_t = hh + z * (h - hh), z = σ(xz + h·Rz), r = σ(xr + h·Rr), hh = tanh(xh + (r*h)·Rh) or, with
        linear_before_reset, tanh(xh + r*(h·Rh + Rbh))."""
        B, H = self.batch, self.hidden
        e = lambda op, ins, stem: self.emit(op, ins, (B, H), f"t{t}/{stem}")  # noqa: E731
        z = e("Sigmoid", [e("Add", [xw[0], e("MatMul", [h, self.rt[0]], "hz")], "az")], "z")
        r = e("Sigmoid", [e("Add", [xw[1], e("MatMul", [h, self.rt[1]], "hr")], "ar")], "r")
        if self.lbr:
            hr = e("Add", [e("MatMul", [h, self.rt[2]], "hh"), self.rbh], "hhb")
            pre = e("Add", [xw[2], e("Mul", [r, hr], "rhh")], "ah")
        else:
            pre = e("Add", [xw[2], e("MatMul", [e("Mul", [r, h], "rh"), self.rt[2]], "hh")], "ah")
        hh = e("Tanh", [pre], "cand")
        return e("Add", [hh, e("Mul", [z, e("Sub", [h, hh], "d")], "zd")], "h")


class PeepholeLstmUnroller(StepUnroller):
    """A forward LSTM with peepholes as per-step standard operators (gate order i, o, f, c; P holds i, o, f)."""

    GATES = "iofc"

    def __init__(self, g: Graph, node: Node) -> None:
        ins = node.inputs + [""] * (8 - len(node.inputs))
        H = int(node.attrs.get("hidden_size") or g.constant(ins[2]).shape[-1])
        b = g.constant(ins[3])[0] if ins[3] else np.zeros(8 * H)
        super().__init__(g, node, b[:4 * H] + b[4 * H:])
        p = g.constant(ins[7])[0]
        self.p = [g.add_weight(f"{node.name}/P{k}", p[i * H:(i + 1) * H].astype(self.dtype))
                  for i, k in enumerate("iof")]
        self.init_c = ins[6]

    def run(self) -> list[Node]:
        """Per step: i, f from the previous cell, o from the new one; Y, Y_h, Y_c wired."""
        h, c = self.state(self.init_h, "h_init"), self.state(self.init_c, "c_init")
        hs = []
        for t in range(self.steps):
            h, c = self.step(t, h, c, self.step_inputs(t))
            hs.append(h)
        self.wire_outputs(hs, c)
        return self.new_nodes

    def step(self, t: int, h: str, c: str, xw: list[str]) -> tuple[str, str]:
        """i = σ(xi + h·Ri + Pi*c), f = σ(xf + h·Rf + Pf*c), c' = f*c + i*tanh(xc + h·Rc),
        o = σ(xo + h·Ro + Po*c'), h' = o*tanh(c')."""
        B, H = self.batch, self.hidden
        e = lambda op, ins, stem: self.emit(op, ins, (B, H), f"t{t}/{stem}")  # noqa: E731
        pre = [e("Add", [xw[k], e("MatMul", [h, self.rt[k]], f"h{g}")], f"a{g}") for k, g in enumerate("iofc")]
        peep = lambda k, cell, g: e("Add", [pre[k], e("Mul", [self.p[k], cell], f"p{g}")], f"ap{g}")  # noqa: E731
        i = e("Sigmoid", [peep(0, c, "i")], "i")
        f = e("Sigmoid", [peep(2, c, "f")], "f")
        c_new = e("Add", [e("Mul", [f, c], "fc"), e("Mul", [i, e("Tanh", [pre[3]], "g")], "ig")], "c")
        o = e("Sigmoid", [peep(1, c_new, "o")], "o")
        return e("Mul", [o, e("Tanh", [c_new], "tc")], "h"), c_new


PASSES: list[Pass] = [
    Pass("fold_constants", lambda g, s: fold_constants(g),
         "evaluate nodes of constant (or empty) inputs and static shapes: shape subgraphs disappear"),
    Pass("lower_einsum", lambda g, s: lower_einsum(g), "Einsum becomes ReduceSum, Transpose, Reshape and MatMul"),
    Pass("lower_training_batchnorm", lambda g, s: lower_training_batchnorm(g),
         "training-mode BatchNormalization becomes ReduceMean/Sub/Mul/Sqrt/Add over batch statistics"),
    Pass("expand_matmul_batches", lambda g, s: expand_matmul_batches(g),
         "MatMul operands with partially broadcast batch dims are Expanded to the full batch", introduces="Expand"),
    Pass("float_operands", lambda g, s: float_operands(g),
         "integer Pow exponents and bool ReduceMax/Min operands become float32"),
    Pass("split_rnn_directions", lambda g, s: split_rnn_directions(g),
         "reverse/bidirectional/batch-major LSTMs and GRUs become forward layout-0 nodes per direction"),
    Pass("alias_views", lambda g, s: alias_views(g), "Reshape-likes and contiguous Slice/Split become views"),
    Pass("dedupe_nodes", lambda g, s: dedupe_nodes(g), "a node repeating an earlier one (op, inputs, attrs) dropped"),
    Pass("unroll_lstm", lambda g, s: unroll_lstm(g), "forward LSTMs become one fused LSTMCell per step"),
    Pass("unroll_gru", lambda g, s: unroll_gru(g), "forward GRUs become per-step MatMul and pointwise operators"),
    Pass("fold_batchnorm", lambda g, s: fold_batchnorm(g), "BatchNormalization folded into its Conv/Gemm"),
    Pass("fuse_matmul_epilogues", lambda g, s: fuse_matmul_epilogues(g),
         "a MatMul's scalar Mul/Div and constant Add become one FusedMatMul", introduces="FusedMatMul"),
    Pass("fuse_activations", fuse_activations, "Relu/Gelu folded into the MatMul/Gemm/Conv that feeds it alone"),
    Pass("fuse_residuals", lambda g, s: fuse_residuals(g),
         "a residual Add (+Relu) of a Conv's sole-read output folded into the Conv's epilogue",
         introduces=FUSED_CONV_ADD),
    Pass("fuse_elementwise", lambda g, s: fuse_elementwise(g),
         "a Relu/Sigmoid/Tanh after a binary Add/Sub/Mul/Div or 2-operand Sum fused into it", introduces=FUSED_BINARY),
    Pass("remove_dead", lambda g, s: remove_dead(g), "nodes no graph output depends on are dropped"),
    Pass("eliminate_concats", lambda g, s: eliminate_concats(g), "producers write into their contiguous Concat slice"),
]
TARGET_PASSES: list[TargetPass] = [
    TargetPass("resident_weights", resident_weights,
               "the batch-1 steps of one LSTM layer share packed weights that stay resident on pinned vEUs"),
]
