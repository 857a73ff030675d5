"""Every import in the tree resolves from the tree itself, and the stages import one way.

Reads only files (ast + paths, nothing imported): ``isolde/`` is the package, its stage folders
are links to the top-level ``grammar/``, ``planner/``, ``executor/``, ``repl/`` (pyproject finds
the packages there), so what this test resolves is what an editor, a type checker or an
import-graph tool pointed at the clone resolves.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "isolde"
STAGES = ("grammar", "planner", "executor", "repl")

# stage -> the stages (and facade modules) it may import; data flows grammar -> planner -> executor,
# the REPL uses the facade (and the AST the facade's parse() returns).
MAY_IMPORT = {
    "isolde": {"isolde", "grammar", "planner", "executor", "repl"},
    "grammar": {"isolde", "grammar"},
    "planner": {"isolde", "grammar", "planner"},
    "executor": {"isolde", "grammar", "planner", "executor"},
    "repl": {"isolde", "grammar", "repl"},
}
# Folders whose modules never import Spark (the log and the conflict checker run without a JVM).
NO_SPARK = ("executor/log", "executor/txn")


def _package_modules():
    """(module name, file) for every module of the package, walking the links."""
    for dirpath, dirnames, filenames in os.walk(PACKAGE, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        rel = Path(dirpath).relative_to(ROOT)
        for fn in sorted(filenames):
            if fn.endswith(".py"):
                parts = list(rel.parts) + ([] if fn == "__init__.py" else [fn[:-3]])
                yield ".".join(parts), Path(dirpath) / fn


def _file(dotted: str):
    path = ROOT.joinpath(*dotted.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _resolves(dotted: str) -> bool:
    return _file(dotted) is not None


_DEFINED: dict = {}


def _defined_names(file: Path):
    """Names a module defines at its top level (None: it has a module ``__getattr__``)."""
    if file not in _DEFINED:
        names: set = set()

        def visit(body):
            for node in body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    names.update((a.asname or a.name).split(".")[0] for a in node.names)
                elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For)):
                    for part in ("body", "orelse", "finalbody"):
                        visit(getattr(node, part, []))
                    for handler in getattr(node, "handlers", []):
                        visit(handler.body)

        visit(ast.parse(file.read_text(encoding="utf-8")).body)
        _DEFINED[file] = None if "__getattr__" in names else names
    return _DEFINED[file]


def _missing_names(target: str, names) -> list:
    """Names of ``from target import names`` that are neither submodules nor defined there."""
    defined = _defined_names(_file(target))
    if defined is None:
        return []
    return [n for n in names if n != "*" and n not in defined and not _resolves(f"{target}.{n}")]


def _imports(module: str, file: Path):
    """(absolute name, line, was_relative, names) of every import of an isolde module in a file."""
    is_pkg = file.name == "__init__.py"
    here = module.split(".") if is_pkg else module.split(".")[:-1]
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"), filename=str(file))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "isolde":
                    yield alias.name, node.lineno, False, ()
        elif isinstance(node, ast.ImportFrom):
            names = tuple(a.name for a in node.names)
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                yield target, node.lineno, True, names
            elif node.module and node.module.split(".")[0] == "isolde":
                yield node.module, node.lineno, False, names


MODULES = list(_package_modules())


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else "isolde"


def test_the_package_tree_holds_every_stage():
    assert {m.split(".")[1] for m, _ in MODULES if m.count(".")} >= set(STAGES)
    assert len(MODULES) > 100  # the links are followed: the executor alone has over 100 modules


@pytest.mark.parametrize("module,file", MODULES, ids=[m for m, _ in MODULES])
def test_every_import_resolves_in_the_tree(module, file):
    missing = []
    for target, line, _, names in _imports(module, file):
        if not _resolves(target):
            missing.append(f"line {line}: {target}")
        elif names and (absent := _missing_names(target, names)):
            missing.append(f"line {line}: {', '.join(absent)} from {target}")
    assert not missing, f"{module}: imports that no file of the tree provides: {missing}"


@pytest.mark.parametrize("module,file", MODULES, ids=[m for m, _ in MODULES])
def test_imports_follow_the_data_flow(module, file):
    stage = _stage(module)
    wrong = [f"line {line}: {target}" for target, line, _, _ in _imports(module, file)
             if _stage(target) not in MAY_IMPORT[stage]]
    assert not wrong, f"{module} ({stage}) imports a later stage: {wrong}"


@pytest.mark.parametrize("module,file", [(m, f) for m, f in MODULES if _stage(m) != "isolde"],
                         ids=[m for m, _ in MODULES if _stage(m) != "isolde"])
def test_imports_inside_a_stage_are_relative(module, file):
    stage = _stage(module)
    absolute = [f"line {line}: {target}" for target, line, relative, _ in _imports(module, file)
                if not relative and _stage(target) == stage]
    assert not absolute, f"{module}: same-stage imports should be relative (from .x import y): {absolute}"


@pytest.mark.parametrize("folder", NO_SPARK)
def test_the_log_and_the_checker_never_import_spark(folder):
    offenders = []
    for file in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{file.relative_to(ROOT)}:{node.lineno} {n}" for n in names
                          if n.split(".")[0] in ("pyspark", "py4j")]
    assert not offenders, offenders


def _outside_modules():
    for folder in ("tests", "benchmarks", "examples"):
        for file in sorted((ROOT / folder).rglob("*.py")):
            yield str(file.relative_to(ROOT)), file


@pytest.mark.parametrize("name,file", list(_outside_modules()), ids=[n for n, _ in _outside_modules()])
def test_tests_and_benchmarks_import_paths_that_exist(name, file):
    """A moved module leaves no stale `isolde.x.y` behind, in imports or in patched names."""
    text = file.read_text(encoding="utf-8")
    missing = []
    for target, line, relative, names in _imports("x", file):
        if relative:
            continue
        if not _resolves(target):
            missing.append(f"line {line}: {target}")
        elif names and (absent := _missing_names(target, names)):
            missing.append(f"line {line}: {', '.join(absent)} from {target}")
    for node in ast.walk(ast.parse(text)):
        # monkeypatch.setattr("isolde.executor.rows.dml.NAME", ...) and import_module("isolde...")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.startswith(tuple(f"isolde.{s}." for s in STAGES)):
            dotted = node.value.split(":")[0]
            if " " in dotted or not all(p.isidentifier() for p in dotted.split(".")):
                continue
            if not (_resolves(dotted) or _resolves(dotted.rsplit(".", 1)[0])):
                missing.append(f"line {node.lineno}: '{node.value}'")
    assert not missing, f"{name}: names no module of the tree provides: {missing}"


def test_the_checker_catches_a_stale_path(tmp_path):
    """Test of the test: a path that moved is reported, a relative one resolves."""
    assert _resolves("isolde.executor.rows.dml") and _resolves("isolde.executor.rows")
    assert not _resolves("isolde.executor.dml")
    stale = tmp_path / "stale.py"
    stale.write_text("from isolde.executor.scan import scan\nfrom .scan import scan\n"
                     "from ..session.session import table_functions\n")
    got = list(_imports("isolde.executor.rows.fake", stale))
    assert [t for t, *_ in got] == ["isolde.executor.scan", "isolde.executor.rows.scan",
                                    "isolde.executor.session.session"]
    assert [_resolves(t) for t, *_ in got] == [False, True, True]
    assert _missing_names("isolde.executor.rows.scan", ["scan", "FILE_COL"]) == []
    # a module's name where the package now holds it: the name is not in session.py
    assert _missing_names("isolde.executor.session.session", ["table_functions"]) == ["table_functions"]


# import name -> the declared distribution that provides it, where the names differ
_DISTRIBUTION = {"prompt_toolkit": "prompt-toolkit", "botocore": "boto3"}  # boto3 brings botocore


def _declared():
    import re
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    def names(specs):
        return {re.split(r"[<>=!~\[ ;]", s, maxsplit=1)[0].lower() for s in specs}
    return names(project["dependencies"]), {n for extra in project["optional-dependencies"].values()
                                          for n in names(extra)}


def test_every_third_party_import_is_declared():
    """A module the package imports comes from a declared dependency (an optional one for the
    extras: boto3 for s3://, pyiceberg for UniForm), never only through a test tool's own
    dependencies (pygments came with pytest, and a plain install's REPL would not start)."""
    import sys

    required, optional = _declared()
    undeclared = {}
    for module, file in MODULES:
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else [])
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in ("isolde", "__future__"):
                    continue
                dist = _DISTRIBUTION.get(top, top).lower()
                if dist not in required and dist not in optional:
                    undeclared.setdefault(dist, []).append(module)
    assert not undeclared, f"imported but not declared in pyproject: {undeclared}"
