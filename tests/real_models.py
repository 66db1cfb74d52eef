"""Models the project was not written against: torchvision's image classifiers and small Hugging Face transformers
exported to ONNX the way a user would (`torch.onnx.export`, opset 17, batch 1, random weights), each built for the
CPU target and checked against onnxruntime on the emulator (`rammer run --check`), then built for the GPU with the cost model (no GPU needed) to see
the plan chosen and its predicted ratio against the strongest baseline. Every time it prints is a prediction of the
cost model, not a measurement; the check is a measurement on this machine's CPU.

    .venv-bench/bin/python -m pip install torchvision transformers   # once: not project dependencies
    .venv-bench/bin/python tests/real_models.py [--models a,b] [--work DIR] [--force]

Run from the repository root with a Python that has torch, torchvision, transformers and this checkout. Each model's
results are kept in WORK/NAME.json, so an interrupted run resumes. Not collected by pytest (no `test_` prefix)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-c", "from rammer.cli import main; main()"]
MODELS = ("mobilenet_v3_small", "mnasnet0_5", "regnet_y_400mf", "shufflenet_v2_x1_0", "resnet18", "googlenet",
          "efficientnet_b0", "mobilenet_v2", "densenet121", "convnext_tiny")
# Hugging Face transformers models at small sizes (4 layers or fewer, width 64-256), random weights, their last
# hidden state exported: (config class, model class, config arguments, input: "ids" = 32 token ids, or an image size)
TRANSFORMERS = {
    "bert": ("BertConfig", "BertModel", dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                             intermediate_size=1024, vocab_size=1000), "ids"),
    "gpt2": ("GPT2Config", "GPT2Model", dict(n_embd=256, n_layer=4, n_head=4, vocab_size=1000, n_positions=128),
             "ids"),
    "distilbert": ("DistilBertConfig", "DistilBertModel", dict(dim=256, n_layers=3, n_heads=4, hidden_dim=1024,
                                                               vocab_size=1000), "ids"),
    "t5-encoder": ("T5Config", "T5EncoderModel", dict(d_model=256, num_layers=3, num_heads=4, d_ff=1024,
                                                      vocab_size=1000, d_kv=64), "ids"),
    "roberta": ("RobertaConfig", "RobertaModel", dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                                      intermediate_size=256, vocab_size=1000), "ids"),
    "llama": ("LlamaConfig", "LlamaModel", dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                                num_attention_heads=4, num_key_value_heads=4, vocab_size=1000,
                                                max_position_embeddings=64), "ids"),
    "vit": ("ViTConfig", "ViTModel", dict(hidden_size=192, num_hidden_layers=4, num_attention_heads=3,
                                          intermediate_size=768, image_size=224, patch_size=16), 224),
    "swin": ("SwinConfig", "SwinModel", dict(embed_dim=32, depths=[1, 1], num_heads=[2, 4], image_size=64,
                                             patch_size=4, window_size=4), 64),
}


HEADER = ("| model | operators | CPU build + `run --check` | worst error / tolerance | GPU build (µs, predicted) | "
          "steps | strongest baseline (µs, predicted) | build vs strongest |\n|---|---|---|---|---|---|---|---|")


def export(name: str, path: Path) -> None:
    """torchvision's `name` with random weights, exported in eval mode at batch 1 and 224x224. The batch-norm
    statistics are first measured on random images (a cumulative average over a few batches in train mode), so the
    activations stay of order one through the network: with the initial statistics (mean 0, variance 1) some of these
    networks (EfficientNet, MobileNetV3) end in outputs of 1e-9 to 1e-14, which any absolute tolerance passes."""
    import torch
    import torchvision.models as models
    torch.manual_seed(0)
    model = getattr(models, name)(weights=None)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None  # a cumulative average of the batches below
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(8, 3, 224, 224))
    model.eval()
    torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), str(path), opset_version=17, input_names=["x"],
                      output_names=["y"], dynamo=False)


def export_transformer(name: str, path: Path) -> None:
    """A transformers model of TRANSFORMERS at batch 1 (32 token ids, or one image), its last hidden state as the
    output."""
    import torch
    import transformers
    config_class, model_class, kwargs, given = TRANSFORMERS[name]
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**kwargs)).eval()

    class LastHidden(torch.nn.Module):
        """The model's last_hidden_state alone (the ONNX graph's one output)."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x).last_hidden_state

    x = torch.randint(0, 1000, (1, 32)) if given == "ids" else torch.randn(1, 3, given, given)
    torch.onnx.export(LastHidden(model), (x,), str(path), opset_version=17, input_names=["x"], output_names=["y"],
                      dynamo=False)


def rammer(*args: str) -> tuple[int, str]:
    """Run one `rammer` command from this checkout: its exit status and its output's last line."""
    done = subprocess.run(CLI + list(args), capture_output=True, text=True, cwd=ROOT)
    lines = (done.stdout + done.stderr).strip().splitlines() or ["(no output)"]
    return done.returncode, lines[-1]


def run_model(name: str, work: Path) -> dict:
    """Export, CPU build and check, GPU build with the cost model: one JSON-ready dict."""
    onnx_path = work / f"{name}.onnx"
    if not onnx_path.is_file():
        (export_transformer if name in TRANSFORMERS else export)(name, onnx_path)
    cpu = work / f"cpu-{name}"
    start = time.perf_counter()
    rc, line = rammer("build", str(onnx_path), "-o", str(cpu), "--target", "cpu")
    if rc == 0:
        rc, line = rammer("run", str(cpu), "--check")
    result: dict = {"model": name, "check_rc": rc, "check": line, "cpu_s": round(time.perf_counter() - start, 1)}
    gpu = work / f"gpu-{name}"
    rc, line = rammer("build", str(onnx_path), "-o", str(gpu), "--target", "gpu", "--profile", "model",
                      "--backends", "rtask,library")
    if rc != 0:
        return {**result, "gpu_rc": rc, "gpu": line}
    manifest = json.loads((gpu / "build.json").read_text())
    stats = manifest["stats"]
    steps = [s.get("kind", "?") for s in manifest.get("steps", [])]
    return {**result, "gpu_rc": 0, "operators": stats.get("operators"), "predicted_us": stats["predicted_us"],
            "strongest": stats["strongest_baseline"], "baselines_us": stats["predicted_baselines_us"],
            "vs_strongest": stats["vs_strongest"], "steps": steps}


def row(r: dict) -> str:
    """One markdown row."""
    check = "PASS" if r["check_rc"] == 0 else f"exit {r['check_rc']}: {r['check'][:80]}"
    worst = r["check"].split(", ")[-1].removesuffix(")") if r["check_rc"] == 0 else ""
    if r["gpu_rc"] != 0:
        return f"| {r['model']} | | {check} ({r['cpu_s']} s) | {worst} | exit {r['gpu_rc']}: {r['gpu'][:80]} | | | |"
    kinds = ", ".join(f"{k} x{r['steps'].count(k)}" for k in dict.fromkeys(r["steps"]))
    strongest = r["baselines_us"][r["strongest"]]
    return (f"| {r['model']} | {r['operators']} | {check} ({r['cpu_s']} s) | {worst} | {r['predicted_us']:.0f} | "
            f"{kinds} | {r['strongest']} {strongest:.0f} | {r['vs_strongest']:.2f}x |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join((*MODELS, *TRANSFORMERS)),
                    help="torchvision model names and/or " + ", ".join(TRANSFORMERS))
    ap.add_argument("--work", default="/tmp/real-models")
    ap.add_argument("--force", action="store_true", help="rerun models whose results are kept")
    args = ap.parse_args()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models.split(","):
        kept = work / f"{name}.json"
        if args.force or not kept.is_file():
            kept.write_text(json.dumps(run_model(name, work), indent=1))
        rows.append(row(json.loads(kept.read_text())))
        print(rows[-1], flush=True)
    print("\n" + HEADER + "\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
