"""No function of graphstore/, pipeline/ or components/ is longer than MAX_LINES: long functions
are split into named steps that read top to bottom. A function's length is its lines from ``def``
to its last statement, less the bodies of classes defined inside it (a lazily built class's
methods are functions of their own, each measured)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 60
PACKAGES = ("graphstore", "pipeline", "components")


def long_functions(root: Path, max_lines: int = MAX_LINES) -> list[str]:
    """``path:line name (N lines)`` of every function under ``root``'s PACKAGES over
    ``max_lines``."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                nested = sum(c.end_lineno - c.lineno + 1 for c in ast.walk(node)
                             if isinstance(c, ast.ClassDef))
                length = node.end_lineno - node.lineno + 1 - nested
                if length > max_lines:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} "
                                 f"({length} lines)")
    return found


def test_no_function_is_longer_than_sixty_lines():
    found = long_functions(REPO)
    assert not found, (f"functions over {MAX_LINES} lines (split them into named steps):\n"
                       + "\n".join(found))


def test_the_check_counts_a_function_without_its_nested_classes(tmp_path):
    pkg = tmp_path / "graphstore"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(4))
    klass = "    class K:\n" + "\n".join(f"        y{i} = {i}" for i in range(10))
    (pkg / "m.py").write_text(f"def short():\n{body}\n{klass}\n    return K\n\n\n"
                              f"def long():\n{body}\n{body}\n    return 1\n")
    assert long_functions(tmp_path, max_lines=8) == ["graphstore/m.py:20 long (10 lines)"]
