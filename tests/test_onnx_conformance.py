"""ONNX's operator conformance cases (onnx.backend.test.case.node) for the covered op types, built for the CPU
target and run on the emulator against the outputs ONNX ships; the known failures are listed in
tests/onnx_conformance.yaml with a reason each, and a listed case that passes fails the test (the list shrinks)."""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx_conformance import check_against_list, collect, load_selection, run_cases

SELECTION = load_selection()


def cases_of(op_type: str) -> list:
    """The collected cases of one op type (the collection itself is cached)."""
    return [c for c in collect(SELECTION) if c.op_type == op_type]


@pytest.mark.parametrize("op_type", SELECTION.ops)
def test_onnx_node_cases(tmp_path: Path, op_type: str) -> None:
    cases = cases_of(op_type)
    if not cases:
        pytest.skip(f"onnx {onnx.__version__} ships no single-node float32 case of {op_type}")
    problems = check_against_list(run_cases(cases, tmp_path), SELECTION.known)
    assert not problems, "\n".join(problems)


def test_known_list_names_real_cases_with_reasons() -> None:
    names = {c.name for c in collect(SELECTION)}
    stale = [k for k in SELECTION.known if k not in names]
    assert not stale, f"listed cases that are not selected node cases (remove them): {stale}"
    assert all(isinstance(r, str) and r.strip() and "\n" not in r for r in SELECTION.known.values())
