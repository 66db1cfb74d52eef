"""The house rules that keep the code one-way and typed, read from the source (nothing is imported):

- packages import one way: toolchain/emulator -> converter -> vdevice -> kernel_corpus -> scheduler -> CLIs (every
  import statement, including those inside functions, so a late import that reaches upward fails here);
- no circle between the modules of one package (module-level and function-level imports alike);
- C/C++ `#include`s climb no rank either (a rank-0 stub header may not include the rank-1 emulator's header);
- outcomes are typed: no function returns `X | str` with the str a refusal, and no caller tells a result from a
  reason with `isinstance(..., str)` (toolchain/refusal.py: `Refusal`, `Refused`)."""
from __future__ import annotations

import ast
import re
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
C_SUFFIXES = {".h", ".hpp", ".cuh", ".cu", ".cpp", ".cc", ".c", ".inc"}  # and suffix-less headers under include/
# Circles issue 23's other half (the build pipeline, branch i23b) removes; an entry that no longer holds fails too.
KNOWN_CIRCLES: set[frozenset[str]] = {frozenset({"scheduler.merge", "scheduler.pipeline"})}


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


def package_files(root: Path = REPO, packages=tuple(LAYERS)) -> list[tuple[str, Path]]:
    """(package, file) for every Python file of the project's packages."""
    return [(pkg, f) for pkg in packages for f in sorted((root / pkg).rglob("*.py"))]


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


# ---- circles between the modules of one package ----------------------------------------------------------------
def module_name(root: Path, path: Path) -> str:
    """Dotted name of a module file ('scheduler.backends' for its __init__.py)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(name: str, path: Path, modules: set[str]) -> list[tuple[int, str]]:
    """(line, module) of every project module an import statement of this file loads: the module named, a
    submodule named in `from X import sub`, and the packages above them (their __init__ runs first)."""
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(here[:len(here) - node.level + 1] + [node.module or ""]) if node.level else node.module
            base = (base or "").strip(".")
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            found += [(node.lineno, ".".join(parts[:k])) for k in range(1, len(parts) + 1)
                      if ".".join(parts[:k]) in modules]
    own = {".".join(name.split(".")[:k]) for k in range(1, len(name.split(".")) + 1)}
    return [(line, m) for line, m in found if m not in own]


def module_circles(root: Path, packages) -> list[list[str]]:
    """Every set of modules of one package that import each other round (strongly connected, more than one)."""
    files = {module_name(root, f): f for _, f in package_files(root, packages)}
    graph = {m: {t for _, t in imported_modules(m, f, set(files)) if t.split(".")[0] == m.split(".")[0]}
             for m, f in files.items()}
    return [sorted(c) for c in strongly_connected(graph) if len(c) > 1]


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        u = stack.pop()
                        on_stack.discard(u)
                        comp.append(u)
                        if u == v:
                            break
                    found.append(comp)
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on_stack.add(w)
                work.append((w, iter(sorted(graph.get(w, ())))))
            elif w in on_stack:
                low[v] = min(low[v], index[w])
    return found


def test_no_circle_inside_a_package():
    found = {frozenset(c) for c in module_circles(REPO, tuple(LAYERS))}
    assert found <= KNOWN_CIRCLES, "modules that import each other round:\n" + "\n".join(
        " <-> ".join(sorted(c)) for c in found - KNOWN_CIRCLES)
    assert not KNOWN_CIRCLES - found, f"no longer circles, drop them from KNOWN_CIRCLES: {KNOWN_CIRCLES - found}"


def test_the_checker_sees_circles(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import f\n")                         # module level, relative
    (pkg / "b.py").write_text("def f():\n    import pkg.c\n")                 # function level, absolute
    (pkg / "c.py").write_text("def g():\n    from pkg import a\n")            # `from package import module`
    (pkg / "d.py").write_text("from pkg.a import f\n")                       # into the circle, not part of it
    (pkg / "sub" / "__init__.py").write_text("from .x import h\n")
    (pkg / "sub" / "x.py").write_text("from ..e import k\nh = 1\n")
    (pkg / "e.py").write_text("def k():\n    from .sub import x\n")          # reaches x through sub's __init__
    assert sorted(module_circles(tmp_path, ("pkg",))) == [["pkg.a", "pkg.b", "pkg.c"],
                                                            ["pkg.e", "pkg.sub", "pkg.sub.x"]]


# ---- C/C++ includes --------------------------------------------------------------------------------------------
INCLUDE = re.compile(r'^\s*#\s*include(?:_next)?\s*([<"])([^>"]+)[>"]', re.M)


def c_files(root: Path = REPO, packages=tuple(LAYERS)) -> list[tuple[str, Path]]:
    """(package, file) for every C/C++/CUDA source or header of the project's packages (<cuda/barrier>-style
    headers without a suffix live under an include/ folder)."""
    return [(pkg, f) for pkg in packages for f in sorted((root / pkg).rglob("*"))
            if f.is_file() and (f.suffix in C_SUFFIXES or not f.suffix and "include" in f.relative_to(root).parts)]


def include_climbs(root: Path = REPO, packages=tuple(LAYERS)) -> list[str]:
    """`file:line: includes X (package, rank r)` for every #include whose header only a higher rank provides
    (quoted: the includer's folder first, then any project header of that path; <...>: project headers only)."""
    files = c_files(root, packages)
    owners: dict[str, list[tuple[str, Path]]] = {}
    for pkg, f in files:
        rel = f.relative_to(root).as_posix()
        for k in range(len(rel.split("/"))):
            owners.setdefault("/".join(rel.split("/")[k:]), []).append((pkg, f))
    bad = []
    for pkg, f in files:
        text = f.read_text(errors="replace")
        for m in INCLUDE.finditer(text):
            quote, name = m.groups()
            if quote == '"' and (f.parent / name).is_file():
                continue  # beside the includer: its own package
            providers = [p for p, _ in owners.get(name, [])]
            if providers and min(LAYERS[p] for p in providers) > LAYERS[pkg]:
                line = text.count("\n", 0, m.start()) + 1
                who = min(providers, key=LAYERS.__getitem__)
                bad.append(f"{f.relative_to(root)}:{line}: {pkg} (rank {LAYERS[pkg]}) includes {name} "
                           f"({who}, rank {LAYERS[who]})")
    return bad


def test_c_includes_do_not_climb():
    bad = include_climbs()
    assert not bad, "\n".join(bad)


def test_the_checker_sees_c_includes(tmp_path):
    (tmp_path / "toolchain" / "include").mkdir(parents=True)
    (tmp_path / "cuda_emu" / "include").mkdir(parents=True)
    (tmp_path / "cuda_emu" / "include" / "emu.h").write_text("#pragma once\n#include <stdio.h>\n")
    (tmp_path / "toolchain" / "include" / "stub.h").write_text("#pragma once\n#include <stdio.h>\n#if X\n"
                                                                 "  #  include \"emu.h\"\n#endif\n")
    (tmp_path / "toolchain" / "include" / "ok.h").write_text('#include "stub.h"\n')
    (tmp_path / "cuda_emu" / "include" / "up.h").write_text("#include <stub.h>\n")  # a lower rank: fine
    assert include_climbs(tmp_path, ("toolchain", "cuda_emu")) == [
        "toolchain/include/stub.h:4: toolchain (rank 0) includes emu.h (cuda_emu, rank 1)"]


# ---- typed outcomes ----------------------------------------------------------------------------------------------
def _union_parts(node: ast.expr | None) -> list[str]:
    """The members of an annotation that is a union (`A | B`, `Union[A, B]`, or such a text), by their source."""
    if node is None:
        return []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return _union_parts(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return []
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return (_union_parts(node.left) or [ast.unparse(node.left)]) + \
            (_union_parts(node.right) or [ast.unparse(node.right)])
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("Union", "typing.Union"):
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return [ast.unparse(e) for e in elts]
    return []


def string_outcomes(paths: list[Path]) -> list[str]:
    """`file:line: ...` for every function annotated to return a union of str and a value (None aside), and every
    `isinstance(x, str)` on what a project function returned (x assigned from a call of one)."""
    trees = {p: ast.parse(p.read_text(), filename=str(p)) for p in paths}
    methods = {id(f) for tree in trees.values() for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
               for f in c.body}
    functions = {f.name for tree in trees.values() for f in ast.walk(tree)
                 if isinstance(f, ast.FunctionDef) and id(f) not in methods}
    bad = []
    for path, tree in trees.items():
        where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            parts = _union_parts(fn.returns)
            if "str" in parts and set(parts) - {"str", "None"}:
                bad.append(f"{where}:{fn.lineno}: {fn.name} returns {ast.unparse(fn.returns)}: return the value and "
                           f"raise Refused (or return a Refusal) instead of a reason string")
            outcomes = {t.id for a in ast.walk(fn) if isinstance(a, ast.Assign) and isinstance(a.value, ast.Call)
                        and _callee(a.value) in functions for t in a.targets if isinstance(t, ast.Name)}
            for call in (c for c in ast.walk(fn) if isinstance(c, ast.Call) and _callee(c) == "isinstance"):
                subject, kinds = (call.args + [None, None])[:2]
                if isinstance(subject, ast.Name) and subject.id in outcomes and kinds is not None and \
                        "str" in ast.unparse(kinds):
                    bad.append(f"{where}:{call.lineno}: isinstance({subject.id}, str) tells an outcome by its type")
    return bad


def _callee(call: ast.Call) -> str:
    """The bare name a call calls (`f` of `f(...)` and of `m.f(...)`)."""
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def test_outcomes_are_typed():
    bad = string_outcomes([f for _, f in package_files()])  # the packages (tests and GPU scripts are not product)
    assert not bad, "\n".join(bad)


def test_the_checker_sees_string_outcomes(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from typing import Union\n"
                 "def view(n) -> tuple[int, int] | str:\n    return 'no'\n"
                 "def old(n) -> Union[int, str]:\n    return 1\n"
                 "def text(n) -> 'int | str':\n    return 1\n"
                 "def name(n) -> str | None:\n    return None\n"                      # optional text: fine
                 "def use(n, data):\n"
                 "    v = view(n)\n"
                 "    if isinstance(v, str):\n        return v\n"
                 "    return data.encode() if isinstance(data, str) else data\n")  # an input's type: fine
    assert [ln.split(": ", 1)[0] for ln in string_outcomes([f])] == [f"{f}:2", f"{f}:4", f"{f}:6", f"{f}:12"]
