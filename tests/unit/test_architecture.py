"""docs/architecture.md against the code: every module and name its map lists exists, every
module of graphstore/, pipeline/ and components/ is listed, the light modules it names import no
torch, and examples/ uses only the public API (names of the ``graphstore`` package root)."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ARCHITECTURE = REPO / "docs" / "architecture.md"
MAP_HEADING = "## Map of the library"
PACKAGES = ("graphstore", "pipeline", "components")
def map_rows(text: str) -> dict[str, list[str]]:
    """module -> listed names, from the map table of docs/architecture.md (the section under
    MAP_HEADING, up to the next heading of the same or a higher level)."""
    section = text.split(MAP_HEADING, 1)[1]
    section = re.split(r"\n#{1,2} ", section, maxsplit=1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        module = cells[0].strip("`")
        if module in rows:
            raise AssertionError(f"docs/architecture.md lists {module} twice")
        rows[module] = re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", cells[2])
    return rows


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def defines_nothing(init: Path) -> bool:
    """An ``__init__.py`` whose body is at most a docstring."""
    body = ast.parse(init.read_text()).body
    return all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body)


def modules_needing_a_row() -> list[str]:
    """Every module of PACKAGES but packages that define nothing and private ``_name`` modules."""
    names = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            stem = path.stem
            if stem == "__init__" and defines_nothing(path):
                continue
            if stem.startswith("_") and not stem.startswith("__"):
                continue  # covered by its package's row
            names.append(module_name(path))
    return names


def test_the_map_parser_reads_rows_and_names():
    text = (f"intro\n{MAP_HEADING}\n\n| module | owns | names |\n| --- | --- | --- |\n"
            "| `a.b` | what | `X`, `y_z` |\n| `c` | nothing listed | |\n\n## Next\n| `d` | x | `Y` |\n")
    assert map_rows(text) == {"a.b": ["X", "y_z"], "c": []}


def test_every_module_of_the_library_is_in_the_map():
    listed = map_rows(ARCHITECTURE.read_text())
    missing = [m for m in modules_needing_a_row() if m not in listed]
    assert not missing, ("modules missing from the map in docs/architecture.md (add a row: module, "
                         "what it owns, its main names): " + ", ".join(missing))


def _public_api() -> set[str]:
    import graphstore

    return set(graphstore.__all__)


def example_problems(path: Path, public: set[str]) -> list[str]:
    """Why ``path`` is not public-API-only: graphstore imports other than ``from graphstore
    import <public name>``, and any private (``_name``) name it uses or defines."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "graphstore":
            if node.module != "graphstore":
                found.append(f"line {node.lineno}: from {node.module} import ... (not the package root)")
            found += [f"line {node.lineno}: {a.name} is not in graphstore.__all__"
                      for a in node.names if a.name not in public]
        elif isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] == "graphstore" and a.name != "graphstore"]
        name = (node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name)
                else node.name if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.alias)) else None)
        if name and name.startswith("_") and name != "_" and not (name.startswith("__")
                                                                 and name.endswith("__")):
            found.append(f"line {node.lineno}: private name {name}")
    return found


EXAMPLES = sorted(p for p in (REPO / "examples").glob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_use_only_the_public_api(path):
    problems = example_problems(path, _public_api())
    assert not problems, f"{path.relative_to(REPO)} reaches past the public API:\n" + "\n".join(problems)


def test_the_example_check_catches_private_imports(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from graphstore.training.batches import finish_epoch\nimport graphstore.stage\n"
                   "from graphstore import RemoteDistDataset, _LAZY\nx = RemoteDistDataset._meta\n")
    problems = example_problems(bad, _public_api())
    assert any("graphstore.training.batches" in p for p in problems)
    assert any("import graphstore.stage" in p for p in problems)
    assert any("_LAZY is not in graphstore.__all__" in p for p in problems)
    assert any("private name _meta" in p for p in problems)
    assert example_problems(EXAMPLES[0], _public_api()) == []
