"""The build's Target (vdevice/target.py): one vEU count from `--veus` to the launched program, vEUs per SM into the
generated program's launch bounds, and a build that imports the model and runs the graph passes once, whatever
targets its search tries."""
from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path

import onnx
import pytest
from test_build import assert_close, ort_outputs, rammer_cli
from test_scheduler import feeds_for, lstm_model, mlp_model

from vdevice.codegen import INTERPRETER
from vdevice.target import H100, Target, TargetKind

needs_emulator = pytest.mark.skipif(importlib.util.find_spec("cuda_emu") is None,
                                    reason="cuda_emu (the CPU emulator) is not available")


@needs_emulator
@pytest.mark.parametrize("veus,model", [(5, "mlp"), (3, "lstm")])
def test_veus_is_one_count_from_the_cli_to_the_launched_program(tmp_path: Path, veus: int, model: str) -> None:
    """`rammer build --target cpu --veus N`: N vEUs in build.json, in every program of programs.json (N instruction
    lists), in the plan, and in the grid the executor launches the generated interpreter with; the outputs match
    onnxruntime."""
    import rammer
    proto = mlp_model(2) if model == "mlp" else lstm_model(steps=4, batch=1, hidden=8, layers=2)
    path = tmp_path / f"{model}.onnx"
    onnx.save(proto, path)
    res = rammer_cli("build", str(path), "-o", str(tmp_path / "out"), "--target", "cpu", "--veus", str(veus))
    assert res.returncode == 0, res.stderr
    out = tmp_path / "out"
    assert json.loads((out / "build.json").read_text())["num_veus"] == veus
    programs = json.loads((out / "programs.json").read_text())["programs"]
    assert programs and all(p["num_veus"] == veus and len(p["veus"]) == veus for p in programs)
    assert json.loads((out / "plan.json").read_text())["num_veus"] == veus
    built = rammer.load(str(out))
    ex = built.executor("persistent")
    assert [ld.tables.num_veus for ld in ex.loaded] == [veus] * len(programs)
    feeds = feeds_for(proto, seed=veus)
    assert_close(built.run(feeds), ort_outputs(proto, feeds))


@pytest.mark.parametrize("veus", [1, 132, 200, 400])
def test_veus_per_sm_of_a_gpu_build_reaches_the_launch_bounds(tmp_path: Path, veus: int) -> None:
    """A GPU build of N vEUs shares each SM among ceil(N / 132) of them: the build records it and the generated
    interpreter asks ptxas for that many per SM (`__launch_bounds__(threads, k)`)."""
    from rammer.build import build_model
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(2), path)
    built = build_model(path, tmp_path / "out", target="gpu", veus=veus, quiet=True, compile_check=False,
                        profile="model")
    k = math.ceil(veus / 132)
    assert built.manifest.veus == veus and built.manifest.stats["veus_per_sm"] == k
    source = (tmp_path / "out" / "program.cu").read_text()
    bounds = re.findall(rf"__launch_bounds__\((\d+), (\d+)\)\s*{INTERPRETER}\(", source)
    assert len(bounds) == 1 and int(bounds[0][1]) == k


def test_target_at_and_resident_budget_by_hand() -> None:
    """k vEUs on every SM: 132 k vEUs; a slice budget is the SM's shared memory split k ways in 128-byte units,
    less the driver's 1 KB, the vEU's 336-byte control block and the headroom (64 KB split k ways, at least 16 KB)."""
    base = Target(TargetKind.GPU, 132)
    for k in (1, 2, 3, 4):
        t = base.at(k)
        assert (t.veus, t.veus_per_sm) == (132 * k, k) and t.kind == TargetKind.GPU
        share = min(227 * 1024, (228 * 1024 // k) // 128 * 128 - 1024)
        assert t.resident_budget == share - 336 - max(16 * 1024, 64 * 1024 // k)
    assert H100.sms == 132
    with pytest.raises(ValueError):
        Target(TargetKind.CPU, 0)


@pytest.mark.nvcc
def test_a_gpu_search_imports_and_passes_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU build whose search sizes resident slices for 1-4 vEUs per SM imports the model and runs the graph
    passes once; only the target passes run per target tried, on copies (the first graph stays as imported and
    passed)."""
    import scheduler.pipeline as pipeline
    from rammer.build import build_model
    from toolchain.nvcc import find_nvcc
    if find_nvcc() is None:
        pytest.skip("needs nvcc: a --target gpu build takes the vEUs per SM from ptxas")
    calls: dict[str, int] = {"import": 0, "passes": 0, "target passes": 0}
    targets: list[int] = []

    def counted(name: str, fn):  # noqa: ANN001, ANN202
        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            calls[name] += 1
            if name == "target passes":
                targets.append(args[1].veus_per_sm)
            return fn(*args, **kwargs)
        return wrapper
    monkeypatch.setattr(pipeline, "import_model", counted("import", pipeline.import_model))
    monkeypatch.setattr(pipeline, "run_passes", counted("passes", pipeline.run_passes))
    monkeypatch.setattr(pipeline, "run_target_passes", counted("target passes", pipeline.run_target_passes))
    path = tmp_path / "lstm.onnx"
    onnx.save(lstm_model(steps=3, batch=1, isize=128, hidden=128, layers=2), str(path))
    build_model(path, tmp_path / "out", target="gpu", quiet=True, profile="model")
    search = json.loads((tmp_path / "out" / "build.json").read_text())["stats"]["resident_search"]
    assert search is not None and [t["target"] for t in search["trials"]] == [1, 2, 3, 4]
    assert calls["import"] == 1 and calls["passes"] == 1
    assert sorted(set(targets)) == [1, 2, 3, 4] and calls["target passes"] == len(targets)
