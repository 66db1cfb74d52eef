"""Models exported from PyTorch (rammer/torch_export.py): each exports, builds for the CPU target and matches
onnxruntime at `rammer run --check`'s tolerance. Needs torch (the `bench` extra): skipped, with the reason shown,
without it."""
from __future__ import annotations

from pathlib import Path

import pytest

from rammer.torch_export import MODELS, build_and_check


@pytest.mark.slow
@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
@pytest.mark.parametrize("name", list(MODELS))
def test_exported_model_builds_and_matches_onnxruntime(tmp_path: Path, name: str, exporter: str) -> None:
    pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[bench]')")
    if exporter == "dynamo":
        pytest.importorskip("onnxscript", reason="onnxscript (torch's dynamo exporter) is not installed")
    result = build_and_check(name, tmp_path, exporter=exporter)
    assert result.status == "pass", f"{name}: {result.status} {result.detail}"
    assert result.worst_ratio is not None and result.worst_ratio <= 1.0  # every element within --check's bound
    assert result.input_dependent, f"{name}: the output does not depend on the input, the check proves nothing"


def test_export_cli_without_torch_or_with_an_unknown_model_is_one_line(capsys) -> None:
    from rammer.torch_export import main
    code = main(["-o", "/nonexistent-never-written", "--models", "no_such_model"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "error:" in err
