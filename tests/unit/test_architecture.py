"""docs/architecture.md against the code: every module and name its map lists exists, every
module of graphstore/, pipeline/ and components/ is listed, the light modules it names import no
torch, and examples/ uses only the public API (names of the ``graphstore`` package root)."""

from __future__ import annotations

import ast
import re
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
    bad.write_text("from graphstore.training.batches import finish_epoch\nimport graphstore.config.stage\n"
                   "from graphstore import RemoteDistDataset, _LAZY\nx = RemoteDistDataset._meta\n")
    problems = example_problems(bad, _public_api())
    assert any("graphstore.training.batches" in p for p in problems)
    assert any("import graphstore.config.stage" in p for p in problems)
    assert any("_LAZY is not in graphstore.__all__" in p for p in problems)
    assert any("private name _meta" in p for p in problems)
    assert example_problems(EXAMPLES[0], _public_api()) == []


LAYERS_HEADING = "## Layers and dependency rules"


def layer_ranks(text: str) -> dict[str, int]:
    """layer folder -> its rank, from the numbered list under LAYERS_HEADING (``N. `a`, `b`: ...``:
    every layer named before the colon has rank N)."""
    section = text.split(LAYERS_HEADING, 1)[1]
    section = re.split(r"\n#{1,2} ", section, maxsplit=1)[0]
    ranks: dict[str, int] = {}
    for line in section.splitlines():
        m = re.match(r"^(\d+)\. ((?:`\w+`(?:, )?)+):", line)
        if m:
            for name in re.findall(r"`(\w+)`", m.group(2)):
                ranks[name] = int(m.group(1))
    return ranks


def graphstore_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every graphstore import in ``path``, function-level ones too; names
    imported from the package root count as ``graphstore.<name>``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "graphstore":
            if node.module == "graphstore":
                found += [(node.lineno, f"graphstore.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "graphstore"]
    return found


def layering_problems(root: Path, ranks: dict[str, int]) -> list[str]:
    """Imports under ``root``/graphstore that break the layer rules: a layer importing one ranked
    after it or a peer of its rank, a folder that is in no layer, or an import through the package
    root (``from graphstore import X`` / ``import graphstore``) anywhere in graphstore/, pipeline/
    or components/."""
    problems = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            if rel == Path("graphstore/__init__.py"):
                continue
            parts = rel.parts
            here = parts[1] if package == "graphstore" and len(parts) > 2 else None
            if package == "graphstore" and here is None:
                problems.append(f"{rel}: a module at the top of graphstore/ (put it in a layer)")
                continue
            if here is not None and here not in ranks:
                problems.append(f"{rel}: graphstore/{here}/ is in no layer of docs/architecture.md")
                continue
            for line, module in graphstore_imports(path):
                target = module.split(".")
                if len(target) < 2 or target[1] not in ranks:
                    problems.append(f"{rel}:{line}: imports {module} through the package root")
                    continue
                there = target[1]
                if here is None or there == here:
                    continue
                if ranks[there] >= ranks[here]:
                    problems.append(f"{rel}:{line}: layer {here} ({ranks[here]}) imports {module} "
                                    f"(layer {there}, {ranks[there]})")
    return problems


def test_the_library_is_laid_out_by_layer_and_imports_only_downwards():
    ranks = layer_ranks(ARCHITECTURE.read_text())
    folders = sorted(p.name for p in (REPO / "graphstore").iterdir()
                     if p.is_dir() and (p / "__init__.py").exists())
    assert sorted(ranks) == folders, "docs/architecture.md's layers are not graphstore/'s folders"
    entries = [p.name for p in (REPO / "graphstore").iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 13, f"graphstore/ has {len(entries)} entries: {sorted(entries)}"
    problems = layering_problems(REPO, ranks)
    assert not problems, "imports against the layers of docs/architecture.md:\n" + "\n".join(problems)


def test_the_layer_check_catches_upward_peer_root_and_loose_imports(tmp_path):
    def write(rel: str, text: str) -> None:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    for package in PACKAGES:
        write(f"{package}/__init__.py", "")
    write("graphstore/low/__init__.py", "")
    write("graphstore/low/a.py", "def f():\n    from graphstore.high.b import g\n")  # upward
    write("graphstore/high/b.py", "from graphstore.low.a import f\nfrom graphstore import RunPaths\n")
    write("graphstore/peer/c.py", "import graphstore.side.d\n")
    write("graphstore/side/d.py", "")
    write("graphstore/loose.py", "")
    write("graphstore/nolayer/e.py", "")
    write("pipeline/p.py", "from graphstore import uris\nfrom graphstore.low.a import f\n")
    problems = layering_problems(tmp_path, {"low": 1, "high": 2, "peer": 3, "side": 3})
    text = "\n".join(problems)
    assert "graphstore/low/a.py:2: layer low (1) imports graphstore.high.b (layer high, 2)" in text
    assert "graphstore/high/b.py:2: imports graphstore.RunPaths through the package root" in text
    assert "graphstore/peer/c.py:1: layer peer (3) imports graphstore.side.d (layer side, 3)" in text
    assert "graphstore/loose.py: a module at the top of graphstore/" in text
    assert "graphstore/nolayer/e.py: graphstore/nolayer/ is in no layer" in text
    assert "pipeline/p.py:1: imports graphstore.uris through the package root" in text
    assert len(problems) == 6, text
    assert layer_ranks("x\n## Layers and dependency rules\n1. `a`: x\n2. `b`, `c`: y\n## Next\n3. `d`: z\n") \
        == {"a": 1, "b": 2, "c": 2}


MODE_NAMES = frozenset({"graph_store", "colocated", "replicated"})
MODE_QUESTION_ALLOWED = ("graphstore/modes/", "graphstore/config/",
                         "pipeline/plan.py", "pipeline/vertex.py")
"""Where code may ask which mode it runs in: the modes themselves (their one choice point,
graphstore.modes.machine, included), the config that reads the mode, and the pipeline's per-mode
job layout (the machines `pipeline plan` sizes and the Vertex AI worker pools of each mode)."""


def mode_questions(path: Path) -> list[int]:
    """Lines of ``path`` that ask which mode the code runs in: an attribute ``replicated`` /
    ``colocated`` / ``effective_mode`` (the configs' and cluster infos' mode flags), a comparison
    with a mode's name, ``getattr(x, "<mode>")``, ``isinstance`` against a cluster description,
    or a loader asking whether it has a driver (``_driver is None``: replicated mode's Ray Data)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in (*MODE_NAMES, "effective_mode"):
            lines.append(node.lineno)
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Constant) and o.value in MODE_NAMES for o in operands):
                lines.append(node.lineno)
            elif any(isinstance(o, ast.Attribute) and o.attr == "_driver" for o in operands):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            args = node.args
            if node.func.id == "getattr" and len(args) >= 2 and isinstance(args[1], ast.Constant) \
                    and args[1].value in MODE_NAMES:
                lines.append(node.lineno)
            if node.func.id == "isinstance" and len(args) == 2 and any(
                    isinstance(n, ast.Name) and n.id in ("GraphStoreInfo", "ReplicatedInfo")
                    for n in ast.walk(args[1])):
                lines.append(node.lineno)
    return sorted(set(lines))


def mode_question_sites(root: Path) -> dict[str, list[int]]:
    """``{file: lines}`` of every mode question in graphstore/, pipeline/ and components/
    outside :data:`MODE_QUESTION_ALLOWED`."""
    sites = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel.startswith(MODE_QUESTION_ALLOWED):
                continue
            lines = mode_questions(path)
            if lines:
                sites[rel] = lines
    return sites


def test_no_code_outside_the_modes_asks_which_mode_it_runs_in():
    """The trainer, the inferencer, the loaders and the pipeline's stages run the same code in
    every mode; a mode's difference lives in its package under graphstore/modes/ (issue: the mode
    is a value)."""
    sites = mode_question_sites(REPO)
    assert not sites, ("mode questions outside graphstore/modes/ and the config (move the "
                       f"difference into the mode's package): {sites}")


def test_the_mode_question_count_catches_each_form(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "graphstore" / "modes").mkdir()
    (tmp_path / "graphstore" / "t.py").write_text(
        "if res.trainer.replicated:\n    pass\n"                 # 1
        "x = info.colocated\n"                                    # 3
        "y = res.mode == 'graph_store'\n"                         # 4
        "z = getattr(info, 'replicated', False)\n"                # 5
        "w = isinstance(info, ReplicatedInfo)\n"                  # 6
        "v = self._driver is None\n"                              # 7
        "ok = self.mode != 'CPU'\n"                               # GLT's mode: not ours
        "from graphstore.modes.replicated import x\n")            # an import: not a question
    (tmp_path / "graphstore" / "modes" / "m.py").write_text("if info.colocated:\n    pass\n")
    (tmp_path / "pipeline" / "plan.py").write_text("if res.trainer.replicated:\n    pass\n")
    assert mode_question_sites(tmp_path) == {"graphstore/t.py": [1, 3, 4, 5, 6, 7]}
