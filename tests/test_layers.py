"""The packages import one way: toolchain/emulator -> converter -> vdevice -> kernel_corpus -> scheduler -> CLIs.

Read from the source with ast (every import statement, including those inside functions), so a late import
that reaches upward or a circle between two packages fails here before it confuses anyone."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Rank of each package: a module may import packages of a lower rank, and its own package; never a higher
# rank, never a peer of the same rank (peers are independent products).
LAYERS = {
    "toolchain": 0,
    "cuda_emu": 1,
    "converter": 2,
    "vdevice": 3,
    "kernel_corpus": 4,
    "scheduler": 5,
    "rammer": 6,
    "rtransform": 6,
}


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import in a file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def package_files() -> list[tuple[str, Path]]:
    """(package, file) for every Python file of the project's packages."""
    return [(pkg, f) for pkg in LAYERS for f in sorted((REPO / pkg).rglob("*.py"))]


def test_every_package_is_ranked():
    found = {p.name for p in REPO.iterdir() if (p / "__init__.py").is_file() and p.name != "tests"}
    assert found == set(LAYERS), "rank every top-level package in LAYERS"


@pytest.mark.parametrize("pkg", sorted(LAYERS))
def test_no_upward_or_sideways_import(pkg):
    bad = []
    for owner, path in package_files():
        if owner != pkg:
            continue
        for line, target in imports_of(path):
            if target in LAYERS and target != pkg and LAYERS[target] >= LAYERS[pkg]:
                bad.append(f"{path.relative_to(REPO)}:{line}: {pkg} (rank {LAYERS[pkg]}) imports {target} "
                           f"(rank {LAYERS[target]})")
    assert not bad, "\n".join(bad)


def test_the_checker_sees_late_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from scheduler.graph import Graph\n    import rammer.cli\n")
    assert imports_of(f) == [(2, "scheduler"), (3, "rammer")]
