"""Elementwise activation fusion: a binary Add/Sub/Mul/Div (or a two-operand Sum) whose output only a Relu (or
Sigmoid, Tanh) reads becomes one FusedBinary node (attributes `op` and `activation`): one elementwise launch instead
of two, the intermediate tensor never written (kernel_corpus/ops/elementwise.py, binary_same_act/binary_bcast_act).

The cells' `Add` then `Relu` in NASNet are the cases this targets; a residual `Add` (+`Relu`) of a convolution's
sole-read output (ResNeXt's blocks) goes into the convolution's epilogue instead (scheduler/fuse_residual.py, the pass
before this one)."""
from __future__ import annotations

from .graph import Graph, Node, present, sole_reader, viewed_bases

FUSED_BINARY = "FusedBinary"
BINARY = {"Add": "Add", "Sub": "Sub", "Mul": "Mul", "Div": "Div", "Sum": "Add"}  # node op type -> FusedBinary op
ACTIVATIONS = ("Relu", "Sigmoid", "Tanh")  # what binary_same_act/binary_bcast_act apply (attribute-free unary ops)


def fusable(g: Graph, node: Node) -> bool:
    """A float32 binary node of two present operands (Sum: exactly two)."""
    ins = node.inputs
    if node.op_type not in BINARY or len(ins) != 2 or len(present(ins)) != 2 or len(present(node.outputs)) != 1:
        return False
    return all(g.tensors[n].dtype == "float32" for n in ins + node.outputs[:1])


def fuse_elementwise(g: Graph) -> int:
    """Fold each activation that alone reads a binary node's output into that node; return how many."""
    consumers, viewed = g.consumers(), viewed_bases(g)
    removed: set[int] = set()
    for node in g.nodes:
        if not fusable(g, node):
            continue
        out = node.outputs[0]
        act = sole_reader(g, out, consumers, viewed)
        if act is None or act.op_type not in ACTIVATIONS or act.inputs[0] != out:
            continue
        if g.tensors[act.outputs[0]].shape != g.tensors[out].shape:
            continue
        node.attrs = {"op": BINARY[node.op_type], "activation": act.op_type}
        node.op_type = FUSED_BINARY
        del g.tensors[out]
        node.outputs = [act.outputs[0]]
        removed.add(id(act))
    g.nodes = [n for n in g.nodes if id(n) not in removed]
    if removed:
        g.notes.append(f"activations fused into the binary elementwise op before them (FusedBinary): "
                       f"{len(removed)} launch(es) fewer")
    return len(removed)
