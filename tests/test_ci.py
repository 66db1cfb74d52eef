"""CI runs what the README says (issue 27): every pytest command of the README's test section is a line of .ci/run,
the README test command first, and the slow tests it leaves out (pyproject's addopts) have a step of their own."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _pytest_commands() -> list[str]:
    """The pytest invocations of the README's bash blocks, in order (an install before `&&` left off)."""
    blocks = re.findall(r"```bash\n(.*?)\n```", (REPO / "README.md").read_text(), re.S)
    return [part.strip() for block in blocks for part in block.split("&&") if " -m pytest " in part]


def test_ci_runs_the_readmes_test_commands_verbatim() -> None:
    commands = _pytest_commands()
    assert commands[0] == "python3 -m pytest -q -ra -n auto"
    assert "python3 -m pytest -q -ra -n auto -m slow" in commands
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    for command in commands:
        assert command in ci, f".ci/run does not run the README's `{command}`"
    assert ci.index(commands[0]) < ci.index("python3 -m pytest -q -ra -n auto -m slow")


def test_the_readme_command_leaves_the_slow_tests_to_their_step() -> None:
    """pyproject's pytest section deselects `slow` by default and describes the marker."""
    text = (REPO / "pyproject.toml").read_text()
    section = text[text.index("[tool.pytest.ini_options]"):]
    assert re.search(r'^addopts = \["-m", "not slow"', section, re.M)
    assert '"slow: ' in section
