"""Convolutional models: ResNeXt-29, AlexNet, SqueezeNet 1.1, Inception-V3."""
from __future__ import annotations

from dataclasses import dataclass

from .builder import GraphBuilder


def _div(c: int, d: int) -> int:
    """Channel count scaled down for --small, never below 4."""
    return max(4, c // d)


@dataclass(frozen=True)
class ResNeXtConfig:
    """ResNeXt-29 (C x Dd): cardinality, bottleneck width, blocks per stage, stem and stage output widths."""

    image: int
    stem: int
    cardinality: int
    width: int
    blocks: int
    outs: tuple[int, int, int]
    classes: int = 10


def _resnext_block(g: GraphBuilder, x: str, inner: int, out: int, groups: int, stride: int) -> str:
    """Bottleneck: 1x1 -> grouped 3x3 (stride) -> 1x1, plus identity or 1x1-projection shortcut."""
    y = g.conv_bn_relu(x, inner, 1)
    y = g.conv_bn_relu(y, inner, 3, stride, 1, group=groups)
    y = g.conv_bn(y, out, 1)
    short = x if g.shapes[x][1] == out and stride == 1 else g.conv_bn(x, out, 1, stride)
    return g.relu(g.add(y, short))


def resnext(g: GraphBuilder, batch: int, small: bool) -> None:
    """ResNeXt-29 16x64d on CIFAR (32x32): 3 stages x 3 blocks, group width 64 x 2^stage, 10 classes."""
    cfg = ResNeXtConfig(16, 16, 4, 4, 1, (32, 64, 128)) if small else \
        ResNeXtConfig(32, 64, 16, 64, 3, (256, 512, 1024))
    x = g.input("input", (batch, 3, cfg.image, cfg.image))
    x = g.conv_bn_relu(x, cfg.stem, 3, 1, 1)
    for stage, out in enumerate(cfg.outs):
        inner = cfg.cardinality * cfg.width * 2 ** stage
        for block in range(cfg.blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            x = _resnext_block(g, x, inner, out, cfg.cardinality, stride)
    g.output(g.classifier(x, cfg.classes), "output")


def alexnet(g: GraphBuilder, batch: int, small: bool) -> None:
    """AlexNet (torchvision layout) on 224x224, 1000 classes; --small: 64x64, channels / 4, 10 classes."""
    d, image, fc, classes = (4, 64, 256, 10) if small else (1, 224, 4096, 1000)
    x = g.input("input", (batch, 3, image, image))
    x = g.pool("MaxPool", g.relu(g.conv(x, _div(64, d), 11, 4, 2)), 3, 2)
    x = g.pool("MaxPool", g.relu(g.conv(x, _div(192, d), 5, 1, 2)), 3, 2)
    x = g.relu(g.conv(x, _div(384, d), 3, 1, 1))
    x = g.relu(g.conv(x, _div(256, d), 3, 1, 1))
    x = g.pool("MaxPool", g.relu(g.conv(x, _div(256, d), 3, 1, 1)), 3, 2)
    x = g.flatten(x)
    x = g.relu(g.gemm(x, fc))
    x = g.relu(g.gemm(x, fc))
    g.output(g.gemm(x, classes), "output")


def _fire(g: GraphBuilder, x: str, squeeze: int, expand: int) -> str:
    """SqueezeNet fire module: 1x1 squeeze, then 1x1 and 3x3 expands concatenated."""
    s = g.relu(g.conv(x, squeeze, 1))
    return g.concat([g.relu(g.conv(s, expand, 1)), g.relu(g.conv(s, expand, 3, 1, 1))])


def squeezenet(g: GraphBuilder, batch: int, small: bool) -> None:
    """SqueezeNet 1.1 on 224x224 (8 fire modules, 1000 classes); --small: 64x64, channels / 4, 10 classes."""
    d, image, classes = (4, 64, 10) if small else (1, 224, 1000)
    fires = [(16, 64), (16, 64), None, (32, 128), (32, 128), None, (48, 192), (48, 192), (64, 256), (64, 256)]
    x = g.input("input", (batch, 3, image, image))
    x = g.pool("MaxPool", g.relu(g.conv(x, _div(64, d), 3, 2)), 3, 2)
    for spec in fires:
        x = g.pool("MaxPool", x, 3, 2) if spec is None else _fire(g, x, _div(spec[0], d), _div(spec[1], d))
    x = g.relu(g.conv(x, classes, 1))
    g.output(g.flatten(g.global_pool(x)), "output")


# ---- Inception-V3 (torchvision structure: BasicConv2d = Conv(no bias) + BN + ReLU) --------------------
@dataclass
class Inception:
    """Builder context for Inception-V3: the graph and the channel divisor of --small."""

    g: GraphBuilder
    d: int

    def cbr(self, x: str, c: int, k=1, stride=1, pad=0) -> str:
        """BasicConv2d with the channel count scaled by the divisor."""
        return self.g.conv_bn_relu(x, _div(c, self.d), k, stride, pad)

    def avg_branch(self, x: str, c: int) -> str:
        """3x3 stride-1 average pool then a 1x1 conv."""
        return self.cbr(self.g.pool("AveragePool", x, 3, 1, 1), c)

    def module_a(self, x: str, pool_features: int) -> str:
        """Mixed_5b/c/d: 1x1, 5x5, double 3x3 and pool branches at 35x35."""
        b1 = self.cbr(x, 64)
        b5 = self.cbr(self.cbr(x, 48), 64, 5, 1, 2)
        b3 = self.cbr(self.cbr(self.cbr(x, 64), 96, 3, 1, 1), 96, 3, 1, 1)
        return self.g.concat([b1, b5, b3, self.avg_branch(x, pool_features)])

    def module_b(self, x: str) -> str:
        """Mixed_6a: grid reduction 35 -> 17."""
        b3 = self.cbr(x, 384, 3, 2)
        bd = self.cbr(self.cbr(self.cbr(x, 64), 96, 3, 1, 1), 96, 3, 2)
        return self.g.concat([b3, bd, self.g.pool("MaxPool", x, 3, 2)])

    def module_c(self, x: str, c7: int) -> str:
        """Mixed_6b-e: factorised 7x7 (1x7 / 7x1) branches at 17x17."""
        b1 = self.cbr(x, 192)
        b7 = self.cbr(self.cbr(self.cbr(x, c7), c7, (1, 7), 1, (0, 3)), 192, (7, 1), 1, (3, 0))
        bd = self.cbr(x, c7)
        for c, (k, p) in zip([c7, c7, c7, 192], [((7, 1), (3, 0)), ((1, 7), (0, 3))] * 2):
            bd = self.cbr(bd, c, k, 1, p)
        return self.g.concat([b1, b7, bd, self.avg_branch(x, 192)])

    def module_d(self, x: str) -> str:
        """Mixed_7a: grid reduction 17 -> 8."""
        b3 = self.cbr(self.cbr(x, 192), 320, 3, 2)
        b7 = self.cbr(self.cbr(self.cbr(x, 192), 192, (1, 7), 1, (0, 3)), 192, (7, 1), 1, (3, 0))
        b7 = self.cbr(b7, 192, 3, 2)
        return self.g.concat([b3, b7, self.g.pool("MaxPool", x, 3, 2)])

    def split_3x3(self, x: str) -> str:
        """The expanded-filter-bank pair of Mixed_7b/c: 1x3 and 3x1 on the same input, concatenated."""
        return self.g.concat([self.cbr(x, 384, (1, 3), 1, (0, 1)), self.cbr(x, 384, (3, 1), 1, (1, 0))])

    def module_e(self, x: str) -> str:
        """Mixed_7b/c at 8x8."""
        b1 = self.cbr(x, 320)
        b3 = self.split_3x3(self.cbr(x, 384))
        bd = self.split_3x3(self.cbr(self.cbr(x, 448), 384, 3, 1, 1))
        return self.g.concat([b1, b3, bd, self.avg_branch(x, 192)])

    def stem(self, x: str) -> str:
        """Conv layers and pools from 299x299x3 to 35x35x192."""
        x = self.cbr(self.cbr(self.cbr(x, 32, 3, 2), 32, 3), 64, 3, 1, 1)
        x = self.g.pool("MaxPool", x, 3, 2)
        x = self.cbr(self.cbr(x, 80), 192, 3)
        return self.g.pool("MaxPool", x, 3, 2)


def inception_v3(g: GraphBuilder, batch: int, small: bool) -> None:
    """Inception-V3 on 299x299: stem, 3xA, B, 4xC, D, 2xE, 1000 classes (no auxiliary head, no dropout).

    --small keeps one module of each kind (A, B, C, D, E) at 107x107 with channels / 8 and 10 classes.
    """
    d, image, classes = (8, 107, 10) if small else (1, 299, 1000)
    net = Inception(g, d)
    x = net.stem(g.input("input", (batch, 3, image, image)))
    for pf in [32] if small else [32, 64, 64]:
        x = net.module_a(x, pf)
    x = net.module_b(x)
    for c7 in [128] if small else [128, 160, 160, 192]:
        x = net.module_c(x, c7)
    x = net.module_d(x)
    for _ in range(1 if small else 2):
        x = net.module_e(x)
    g.output(g.classifier(x, classes), "output")
