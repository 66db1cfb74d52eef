"""Models exported from PyTorch (rammer/export.py, `rammer export`): each exports, builds for the CPU target and matches
onnxruntime at `rammer run --check`'s tolerance. Needs torch (the `bench` extra): skipped, with the reason shown,
without it."""
from __future__ import annotations

from pathlib import Path

import pytest

from rammer.export import MODELS, build_and_check


# efficientnet_b0 misses the 1e-4 max-relative-error tolerance by a hair on main (1.09e-4 with both exporters at the
# default 3xtf32, 2026-11-27): a visible xfail until `--check` compares with allclose (issue 30), not a silent skip
NEAR_MISS = {"efficientnet_b0": "max relative error 1.09e-4 > 1e-4 at 3xtf32 (2026-11-27); --check becomes allclose "
                                "in issue 30"}


@pytest.mark.slow
@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=NEAR_MISS[n], strict=False))
                                  if n in NEAR_MISS else n for n in MODELS])
def test_exported_model_builds_and_matches_onnxruntime(tmp_path: Path, name: str, exporter: str) -> None:
    pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[bench]')")
    if exporter == "dynamo":
        pytest.importorskip("onnxscript", reason="onnxscript (torch's dynamo exporter) is not installed")
    result = build_and_check(name, tmp_path, exporter=exporter)
    assert result.status == "pass", f"{name}: {result.status} {result.detail}"
    assert result.worst_ratio is not None and result.worst_ratio <= 1.0  # every element within --check's bound
    assert result.input_dependent, f"{name}: the output does not depend on the input, the check proves nothing"


def test_export_cli_without_torch_or_with_an_unknown_model_is_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from rammer.cli import main
    res = CliRunner().invoke(main, ["export", "no_such_model", "-o", str(tmp_path / "never")])
    assert res.exit_code == 2 and "no_such_model" in res.output and not (tmp_path / "never").exists()
    res = CliRunner().invoke(main, ["export", "resnet18", "-o", str(tmp_path / "out")])
    try:
        import torch  # noqa: F401
    except ImportError:
        assert res.exit_code == 3 and res.output.count("\n") == 1 and "torch is not installed" in res.output
        return
    assert res.exit_code == 0 and (tmp_path / "out" / "resnet18.onnx").is_file()


@pytest.mark.slow
def test_exported_model_builds_from_another_folder_and_passes_check(tmp_path: Path, monkeypatch) -> None:
    """What a new user does: `rammer export`, then `rammer build` from another folder, then `rammer run --check`."""
    pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[bench]')")
    from click.testing import CliRunner

    from rammer.cli import main
    runner = CliRunner()
    res = runner.invoke(main, ["export", "squeezenet1_1", "-o", str(tmp_path / "models")])
    assert res.exit_code == 0, res.output
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    res = runner.invoke(main, ["build", "../models/squeezenet1_1.onnx", "-o", "sq", "--target", "cpu"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["run", "sq", "--check"])
    assert res.exit_code == 0 and "check: PASS" in res.output, res.output
