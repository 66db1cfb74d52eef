"""Residual epilogue fusion: Conv(+bias) -> Add(other) [-> Relu] becomes one FusedConvAdd node whose epilogue
computes act(conv + bias + other) (kernel_corpus/ops/conv.py: every conv kernel of conv.cu and tc.cu adds input 3
after the bias, and a split-K fixup adds it once, after the splits' sum; the library call adds it after cuDNN's).

Applies where the convolution (Conv, or FusedConv without an activation) writes a tensor that only the Add reads
(no view of it, not a graph output), and the Add's other operand has exactly the convolution output's shape
(no broadcast) and is not a strided view. When both operands qualify (ResNeXt's block: the expanding 1x1 Conv and
the projection shortcut's Conv), the later producer in graph order takes the Add: the fused node sits at the Add's
place, so it follows the other operand's producer as any reader does. A Relu that alone reads the Add's output
joins too. The Add(+Relu) launch and the round trip of the convolution's output through memory go."""
from __future__ import annotations

from toolchain.refusal import Refused

from .graph import Graph, Node, present, sole_reader, viewed_bases

FUSED_CONV_ADD = "FusedConvAdd"
HOSTS = ("Conv", "FusedConv")  # a FusedConv's activation must come after the Add: only one without


def fused_inputs(conv: Node, other: str) -> list[str]:
    """The fused node's inputs: the convolution's X, W and bias ('' when absent), then the residual Z (input 3)."""
    return (conv.inputs + ["", ""])[:3] + [other]


def host_geometry_ok(g: Graph, conv: Node, other: str, out: str) -> bool:
    """Whether the conv kernels take the fused node: the corpus's conv geometry with the residual (the direct kernel
    applies wherever it does, so the fused node keeps a candidate)."""
    from kernel_corpus.ops.conv import conv_geometry

    from .workload import node_info
    probe = Node(conv.name, FUSED_CONV_ADD, fused_inputs(conv, other), [out], dict(conv.attrs))
    try:
        conv_geometry(node_info(g, probe))
    except Refused:
        return False
    return True


def residual_host(g: Graph, add: Node, mine: str, other: str, producers: dict[str, Node],
                  consumers: dict[str, list[Node]], viewed: set[str]) -> Node | None:
    """The convolution writing `mine` when it can take `other` into its epilogue in place of `add`, else None."""
    conv = producers.get(mine)
    if conv is None or conv.op_type not in HOSTS or conv.attrs.get("activation") or present(conv.outputs) != [mine]:
        return None
    if mine in g.aliases or sole_reader(g, mine, consumers, viewed) is not add:
        return None
    shape = g.tensors[add.outputs[0]].shape
    if g.tensors[mine].shape != shape or g.tensors[other].shape != shape or g.is_strided(other):
        return None
    if any(g.tensors[n].dtype != "float32" for n in (mine, other, add.outputs[0])):
        return None
    return conv if host_geometry_ok(g, conv, other, add.outputs[0]) else None


def fuse_residuals(g: Graph) -> int:
    """Fold each residual Add (and the Relu that alone reads it) into the convolution producing one of its operands;
    return how many Adds went."""
    consumers, viewed, producers = g.consumers(), viewed_bases(g), g.producers()
    order = {id(n): i for i, n in enumerate(g.nodes)}
    fused: dict[int, Node] = {}  # id(add) -> the node taking its place
    removed: set[int] = set()
    for add in g.nodes:
        if add.op_type not in ("Add", "Sum") or len(add.inputs) != 2 or len(present(add.inputs)) != 2:
            continue
        if len(present(add.outputs)) != 1 or add.inputs[0] == add.inputs[1]:
            continue
        hosts = [(order[id(conv)], conv, other) for mine, other in (add.inputs, add.inputs[::-1])
                 if (conv := residual_host(g, add, mine, other, producers, consumers, viewed)) is not None
                 and id(conv) not in removed]
        if not hosts:
            continue
        _, conv, other = max(hosts, key=lambda h: h[0])
        out = add.outputs[0]
        attrs = {k: v for k, v in conv.attrs.items() if k != "activation"}
        act = sole_reader(g, out, consumers, viewed)
        if act is not None and act.op_type == "Relu" and act.inputs[0] == out and \
                g.tensors[act.outputs[0]].shape == g.tensors[out].shape:
            attrs["activation"] = "Relu"
            del g.tensors[out]
            out = act.outputs[0]
            removed.add(id(act))
        del g.tensors[conv.outputs[0]]
        fused[id(add)] = Node(conv.name, FUSED_CONV_ADD, fused_inputs(conv, other), [out], attrs)
        removed.add(id(conv))
    g.nodes = [fused.get(id(n), n) for n in g.nodes if id(n) not in removed]
    if fused:
        g.notes.append(f"residual Add (+Relu) fused into the producing convolution's epilogue (FusedConvAdd): "
                       f"{len(fused)} node(s)")
    return len(fused)
