"""Refusals of `rammer build` say `error:` once (found by an outside pass: `error: error: --veus must be >= 1`)."""
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small zoo model, written by the CLI a user would call."""
    path = tmp_path_factory.mktemp("m") / "lstm.onnx"
    subprocess.run([sys.executable, "-c", "from rammer.cli import main; main()", "zoo", "lstm-tc", "--small", "-o",
                    str(path)], check=True, capture_output=True, timeout=300)
    return path


@pytest.mark.parametrize("veus", ["0", "-3", "100000000"])
def test_fresh_veus_refusal_says_error_once(tmp_path: Path, small_model: Path, veus: str) -> None:
    """A vEU count the target cannot hold: one `error: --veus ...` line, no output folder."""
    res = subprocess.run([sys.executable, "-c", "from rammer.cli import main; main()", "build", str(small_model),
                          "-o", str(tmp_path / "b"), "--target", "cpu", "--veus", veus],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode != 0
    errors = [line for line in res.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith(f"error: --veus {veus}" if veus.startswith("1") else
                                                     "error: --veus must be >= 1"), res.stderr
    assert "error: error:" not in res.stderr
    assert not (tmp_path / "b").exists()
