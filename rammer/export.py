"""Models exported from PyTorch as users bring them: torchvision-style CNNs (resnet18, mobilenet_v3_small,
squeezenet1_1, efficientnet_b0, random weights, layer for layer as torchvision builds them), a small BERT-style
encoder and a GRU/LSTM speech model, exported with `torch.onnx.export` (the dynamo exporter at the opset it emits
when onnxscript is installed, else the TorchScript exporter at opset 17), built for a target and checked against
onnxruntime at `rammer run --check`'s tolerance.

torchvision itself is not used: the CPU wheel of torch this workplace keeps has no matching torchvision CPU build, so
the four CNNs are written here after torchvision's definitions (same layers, same order, random weights).

`rammer export [NAME ...] -o DIR [--check] [--target cpu] [--json]` exports (and with --check builds and checks)
each, printing one line per model; needs the `bench` extra (torch)."""
from __future__ import annotations

import json
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np


@dataclass
class Exported:
    """One model's outcome: built and checked (`rammer run --check`'s measure), or the one line that stopped it."""

    name: str
    status: str          # exported | pass | fail | refused | export-error
    detail: str = ""
    worst_ratio: float | None = None  # --check's measure: the worst element's share of its tolerance (<= 1 passes)
    opset: int | None = None
    nodes: int = 0
    seconds: float = 0.0
    input_dependent: bool = False  # the outputs change with the input (random weights left a live signal)


# ---- the models (torch is passed in: this module imports without it) ------------------------------------------
def _make_divisible(v: float, divisor: int = 8) -> int:
    """torchvision's channel rounding."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def resnet18(T: Any) -> Any:
    """torchvision's resnet18: BasicBlocks [2, 2, 2, 2], BatchNorm, 1000 classes."""
    nn = T.nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else None)

        def forward(self, x):
            y = T.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return T.relu(y + (self.down(x) if self.down is not None else x))

    layers: list = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*layers)


def squeezenet1_1(T: Any) -> Any:
    """torchvision's squeezenet1_1: Fire modules, ceil-mode max pooling, a 1x1 conv classifier."""
    nn = T.nn

    class Fire(nn.Module):
        def __init__(self, cin: int, squeeze: int, e1: int, e3: int) -> None:
            super().__init__()
            self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU())
            self.e1 = nn.Sequential(nn.Conv2d(squeeze, e1, 1), nn.ReLU())
            self.e3 = nn.Sequential(nn.Conv2d(squeeze, e3, 3, padding=1), nn.ReLU())

        def forward(self, x):
            x = self.squeeze(x)
            return T.cat([self.e1(x), self.e3(x)], 1)

    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, 2), nn.ReLU(), pool(), Fire(64, 16, 64, 64), Fire(128, 16, 64, 64), pool(),
        Fire(128, 32, 128, 128), Fire(256, 32, 128, 128), pool(), Fire(256, 48, 192, 192), Fire(384, 48, 192, 192),
        Fire(384, 64, 256, 256), Fire(512, 64, 256, 256),
        nn.Dropout(0.5), nn.Conv2d(512, 1000, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())


def _conv_bn_act(T: Any, cin: int, cout: int, k: int, stride: int, groups: int, act: Callable | None) -> Any:
    """torchvision's Conv2dNormActivation."""
    nn = T.nn
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, *([act()] if act else []))


def _squeeze_excite(T: Any, channels: int, squeeze: int, act: Callable, gate: Callable) -> Any:
    """torchvision's SqueezeExcitation: pool, 1x1 conv, act, 1x1 conv, gate, scale."""
    nn = T.nn

    class SE(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2 = nn.Conv2d(channels, squeeze, 1), nn.Conv2d(squeeze, channels, 1)
            self.act, self.gate = act(), gate()

        def forward(self, x):
            s = T.nn.functional.adaptive_avg_pool2d(x, 1)
            return x * self.gate(self.fc2(self.act(self.fc1(s))))

    return SE()


def mobilenet_v3_small(T: Any) -> Any:
    """torchvision's mobilenet_v3_small: inverted residuals with squeeze-excitation, Hardswish, Hardsigmoid."""
    nn = T.nn
    # (kernel, expanded, out, SE, activation, stride) as torchvision's table
    table = [(3, 16, 16, True, "RE", 2), (3, 72, 24, False, "RE", 2), (3, 88, 24, False, "RE", 1),
             (5, 96, 40, True, "HS", 2), (5, 240, 40, True, "HS", 1), (5, 240, 40, True, "HS", 1),
             (5, 120, 48, True, "HS", 1), (5, 144, 48, True, "HS", 1), (5, 288, 96, True, "HS", 2),
             (5, 576, 96, True, "HS", 1), (5, 576, 96, True, "HS", 1)]

    class InvertedResidual(nn.Module):
        def __init__(self, cin: int, k: int, exp: int, cout: int, se: bool, act_name: str, stride: int) -> None:
            super().__init__()
            act = nn.Hardswish if act_name == "HS" else nn.ReLU
            layers = [] if exp == cin else [_conv_bn_act(T, cin, exp, 1, 1, 1, act)]
            layers.append(_conv_bn_act(T, exp, exp, k, stride, exp, act))
            if se:
                layers.append(_squeeze_excite(T, exp, _make_divisible(exp // 4), nn.ReLU, nn.Hardsigmoid))
            layers.append(_conv_bn_act(T, exp, cout, 1, 1, 1, None))
            self.block = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.block(x)
            return x + y if self.residual else y

    layers: list = [_conv_bn_act(T, 3, 16, 3, 2, 1, nn.Hardswish)]
    cin = 16
    for k, exp, cout, se, act, stride in table:
        layers.append(InvertedResidual(cin, k, exp, cout, se, act, stride))
        cin = cout
    layers += [_conv_bn_act(T, cin, 576, 1, 1, 1, nn.Hardswish), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Linear(576, 1024), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(1024, 1000)]
    return nn.Sequential(*layers)


def efficientnet_b0(T: Any) -> Any:
    """torchvision's efficientnet_b0: MBConv blocks with SiLU and squeeze-excitation (stochastic depth is the
    identity in eval mode)."""
    nn = T.nn
    # (expand ratio, kernel, stride, in, out, layers) as torchvision's b0 table
    table = [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
             (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)]

    class MBConv(nn.Module):
        def __init__(self, ratio: int, k: int, stride: int, cin: int, cout: int) -> None:
            super().__init__()
            exp = _make_divisible(cin * ratio)
            layers = [] if exp == cin else [_conv_bn_act(T, cin, exp, 1, 1, 1, nn.SiLU)]
            layers += [_conv_bn_act(T, exp, exp, k, stride, exp, nn.SiLU),
                       _squeeze_excite(T, exp, max(1, cin // 4), nn.SiLU, nn.Sigmoid),
                       _conv_bn_act(T, exp, cout, 1, 1, 1, None)]
            self.block = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.block(x)
            return x + y if self.residual else y

    layers: list = [_conv_bn_act(T, 3, 32, 3, 2, 1, nn.SiLU)]
    for ratio, k, stride, cin, cout, n in table:
        for i in range(n):
            layers.append(MBConv(ratio, k, stride if i == 0 else 1, cin if i == 0 else cout, cout))
    layers += [_conv_bn_act(T, 320, 1280, 1, 1, 1, nn.SiLU), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Dropout(0.2), nn.Linear(1280, 1000)]
    return nn.Sequential(*layers)


def bert_encoder(T: Any, vocab: int = 100, hidden: int = 64, heads: int = 4, layers: int = 2,
                 seq: int = 16) -> Any:
    """A small BERT-style encoder written out as BERT's modules are: token and position embeddings, embedding
    LayerNorm, post-LayerNorm layers of multi-head self-attention and a GELU feed-forward block."""
    nn = T.nn
    head_dim = hidden // heads

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden) for _ in range(4))
            self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.up, self.down = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def split(self, t):
            b, s, _ = t.shape
            return t.reshape(b, s, heads, head_dim).transpose(1, 2)

        def forward(self, x):
            q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
            att = T.softmax(q @ k.transpose(-1, -2) / head_dim ** 0.5, dim=-1)
            ctx = (att @ v).transpose(1, 2).reshape(x.shape)
            x = self.norm1(x + self.o(ctx))
            return self.norm2(x + self.down(T.nn.functional.gelu(self.up(x))))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
            self.norm = nn.LayerNorm(hidden)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))

        def forward(self, ids):
            positions = T.arange(ids.shape[1]).unsqueeze(0)
            x = self.norm(self.tok(ids) + self.pos(positions))
            for layer in self.layers:
                x = layer(x)
            return x

    return Encoder()


def speech_rnn(T: Any, features: int = 40, hidden: int = 64, classes: int = 30) -> Any:
    """A small speech model: a feature projection, a GRU and a bidirectional LSTM over time, a per-frame
    classifier."""
    nn = T.nn

    class Speech(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(features, hidden)
            self.gru = nn.GRU(hidden, hidden)
            self.lstm = nn.LSTM(hidden, hidden, bidirectional=True)
            self.out = nn.Linear(2 * hidden, classes)

        def forward(self, x):
            y, _ = self.gru(T.relu(self.proj(x)))
            y, _ = self.lstm(y)
            return self.out(y)

    return Speech()


@dataclass(frozen=True)
class ModelSpec:
    """How to build one model and a sample input for export (shape, and token ids or floats)."""

    make: Callable[[Any], Any]
    input_shape: tuple[int, ...]
    tokens: int = 0   # > 0: integer ids below this (int64), else float32 features


MODELS = {
    "resnet18": ModelSpec(resnet18, (1, 3, 64, 64)),
    "mobilenet_v3_small": ModelSpec(mobilenet_v3_small, (1, 3, 64, 64)),
    "squeezenet1_1": ModelSpec(squeezenet1_1, (1, 3, 64, 64)),
    "efficientnet_b0": ModelSpec(efficientnet_b0, (1, 3, 64, 64)),
    "bert_encoder": ModelSpec(bert_encoder, (1, 16), tokens=100),
    "speech_rnn": ModelSpec(speech_rnn, (12, 1, 40)),
}


def torchvision_init(T: Any, model: Any, spec: ModelSpec, seed: int) -> None:
    """torchvision's initialisation (Kaiming normal, fan-out, for convolutions), random BatchNorm affine
    parameters, and BatchNorm statistics measured on random inputs (as training would leave them): with torch's
    default statistics (mean 0, variance 1) the depthwise blocks shrink the signal until the outputs no longer
    depend on the input, and the check would prove nothing."""
    g = T.Generator().manual_seed(seed)
    norms = [m for m in model.modules() if isinstance(m, T.nn.BatchNorm2d)]
    for m in model.modules():
        if isinstance(m, T.nn.Conv2d):
            T.nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu", generator=g)
            if m.bias is not None:
                T.nn.init.zeros_(m.bias)
    with T.no_grad():
        for m in norms:
            m.weight.uniform_(0.5, 1.5, generator=g)
            m.bias.normal_(0.0, 0.1, generator=g)
            m.momentum = None  # a cumulative average over the calibration batches
            m.reset_running_stats()
        if norms:
            model.train()
            for k in range(4):
                model(T.from_numpy(np.concatenate([sample_input(spec, seed + 100 + k + 10 * b) for b in range(4)])))
            model.eval()


# ---- export, build, check -------------------------------------------------------------------------------------
def sample_input(spec: ModelSpec, seed: int = 0) -> np.ndarray:
    """A seeded input of the model's shape."""
    rng = np.random.default_rng(seed)
    if spec.tokens:
        return rng.integers(0, spec.tokens, spec.input_shape).astype(np.int64)
    return rng.standard_normal(spec.input_shape).astype(np.float32)


EXPORTERS = ("auto", "dynamo", "torchscript")


def export(name: str, path: Path, seed: int = 0, exporter: str = "auto") -> int:
    """Export one model with random (seeded) weights to `path` (auto: dynamo when onnxscript is installed, else the
    TorchScript exporter at opset 17); returns the default-domain opset written."""
    import onnx
    import torch
    spec = MODELS[name]
    torch.manual_seed(seed)
    model = spec.make(torch).eval()
    torchvision_init(torch, model, spec, seed)
    x = torch.from_numpy(sample_input(spec, seed))
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter == "auto":
            try:
                import onnxscript  # noqa: F401  (the dynamo exporter needs it)
                exporter = "dynamo"
            except ImportError:
                exporter = "torchscript"
        if exporter == "dynamo":
            torch.onnx.export(model, (x,), str(path), dynamo=True, input_names=["x"], verbose=False)
        else:
            torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17, input_names=["x"])
    m = onnx.load(str(path), load_external_data=False)
    return next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 0)


def build_and_check(name: str, out: Path, target: str = "cpu", seed: int = 0, exporter: str = "auto") -> Exported:
    """Export, build for the target, run once and compare with onnxruntime (`rammer run --check`'s measure)."""
    from rammer.build import build_model
    from rammer.check import check_output, reference_outputs
    from scheduler.graph import SchedulerError
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    done = export_only(name, out, seed, exporter)
    if done.status != "exported":
        return done
    path = out / f"{name}.onnx"
    try:
        built = build_model(path, out / f"{name}-build", target=target, quiet=True)
    except SchedulerError as exc:
        return Exported(name, "refused", str(exc).splitlines()[0][:400], None, done.opset, done.nodes,
                        time.perf_counter() - t0)
    feeds = {built.input_names[0]: sample_input(MODELS[name], seed + 1)}
    got = built.run(feeds)
    refs = reference_outputs(path, feeds)
    checks = [check_output(n, got[n], r) for n, r in zip(built.output_names, refs)]
    err = max((c.ratio for c in checks), default=0.0)
    other = reference_outputs(path, {built.input_names[0]: sample_input(MODELS[name], seed + 2)})
    live = any(not np.allclose(a, b, rtol=1e-3, atol=0.0) for a, b in zip(refs, other))
    status = "pass" if all(c.ok for c in checks) else "fail"
    return Exported(name, status, "", err, done.opset, done.nodes, time.perf_counter() - t0, live)


EXPORT_MARK = ".rammer-export"  # marks an output folder as rammer export's own


def export_command(names: tuple[str, ...], out: str, check: bool, target: str, exporter: str, seed: int,
                   as_json: bool) -> int:
    """CLI body of `rammer export`: export each model (a progress line per model on stderr); with --check also
    build it and compare with onnxruntime. Exit 3 without torch, 2 for an unknown model, 1 when a check fails."""
    from toolchain.exits import Exit
    try:
        import torch  # noqa: F401
    except ImportError:
        print("error: torch is not installed: pip install -e '.[bench]'", file=sys.stderr)
        return Exit.MISSING
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"error: unknown model {unknown[0]} (models: {', '.join(MODELS)})", file=sys.stderr)
        return Exit.USAGE
    from toolchain.files import Inputs, OutputError
    try:  # a new or empty folder, or one an earlier export marked: never a folder of the user's
        folder = Inputs().check_folder(out, "-o", ours=lambda p: (p / EXPORT_MARK).is_file(),
                                       tool=f"a folder of rammer export (no {EXPORT_MARK})")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / EXPORT_MARK).write_text("rammer export folder\n")
    except (OutputError, OSError) as exc:
        print(str(exc) if isinstance(exc, OutputError) else f"{out}: error: cannot create the folder: "
              f"{exc.strerror or exc}", file=sys.stderr)
        return Exit.USAGE
    results = []
    for i, name in enumerate(names or tuple(MODELS), 1):
        print(f"[{i}/{len(names or MODELS)}] {name}: {'export, build, check' if check else 'export'} ...",
              end="", file=sys.stderr, flush=True)
        r = build_and_check(name, folder, target, seed, exporter) if check else export_only(name, folder, seed,
                                                                                           exporter)
        print(f" {r.status} ({r.seconds:.1f} s)", file=sys.stderr, flush=True)
        results.append(r)
    if as_json:
        print(json.dumps([r.__dict__ for r in results], indent=1))
    else:
        for r in results:
            err = f" worst {r.worst_ratio:.2g}x the tolerance" if r.worst_ratio is not None else ""
            print(f"{r.status:12} {r.name:20} opset {r.opset} {r.nodes} nodes -> {folder / (r.name + '.onnx')}"
                  f"{err} {r.detail}".rstrip())
    return Exit.OK if all(r.status in ("pass", "exported") for r in results) else Exit.FAILED


def export_only(name: str, out: Path, seed: int = 0, exporter: str = "auto") -> Exported:
    """Export one model to OUT/NAME.onnx (its weights may lie beside it in NAME.onnx.data, as torch writes them)."""
    import onnx

    from scheduler.onnx_import import first_line
    t0 = time.perf_counter()
    path = out / f"{name}.onnx"
    try:
        opset = export(name, path, seed, exporter)
    except Exception as exc:  # the exporter raises many types
        return Exported(name, "export-error", first_line(exc), seconds=time.perf_counter() - t0)
    nodes = len(onnx.load(str(path), load_external_data=False).graph.node)
    return Exported(name, "exported", "", None, opset, nodes, time.perf_counter() - t0)
