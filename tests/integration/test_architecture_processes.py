"""docs/architecture.md against the code: every module and name its map lists exists, every module of
graphstore/, pipeline/ and components/ is listed, the light modules it names import no torch, and
examples/ uses only the public API (names of the ``graphstore`` package root): the tests that start
processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_architecture.py: unit tests start no process."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
import pytest
from tests.unit.test_architecture import (  # noqa: F401 (fixtures among them)
    ARCHITECTURE,
    REPO,
    map_rows,
)

pytestmark = [pytest.mark.integration]


IMPORT_CHECK = r"""
import importlib, json, sys
rows = json.loads(sys.argv[1])
problems = []
for module, names in rows.items():
    try:
        mod = importlib.import_module(module)
    except Exception as exc:
        problems.append(f"{module}: cannot import ({type(exc).__name__}: {exc})")
        continue
    for name in names:
        try:
            getattr(mod, name)
        except AttributeError:
            problems.append(f"{module}: has no name {name!r}")
print(json.dumps(problems))
"""


TORCH_FREE = ("graphstore.config", "graphstore.formats.run_paths", "graphstore.config.stage", "graphstore.export",
              "graphstore.formats.shards.reader", "graphstore.dataset.glt_adapter", "pipeline.__main__",
              "pipeline.stages", "pipeline.launch")
"""The modules docs/architecture.md says import no torch (besides all of pipeline/)."""


def test_every_module_and_name_the_map_lists_exists():
    rows = map_rows(ARCHITECTURE.read_text())
    assert len(rows) > 50, "the map table was not found or not parsed"
    run = subprocess.run([sys.executable, "-c", IMPORT_CHECK, json.dumps(rows)], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    problems = json.loads(run.stdout.strip().splitlines()[-1])
    assert not problems, "docs/architecture.md's map disagrees with the code:\n" + "\n".join(problems)


def test_the_modules_said_to_be_light_import_no_torch():
    code = ("import importlib, sys\n"
            f"for m in {TORCH_FREE!r}: importlib.import_module(m)\n"
            "heavy = [m for m in ('torch', 'torch_geometric', 'graphlearn_torch') if m in sys.modules]\n"
            "print(heavy); sys.exit(bool(heavy))")
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]


def test_every_public_name_of_the_package_root_resolves():
    code = ("import graphstore\n"
            "missing = [n for n in graphstore.__all__ if not hasattr(graphstore, n)]\n"
            "print(missing); raise SystemExit(bool(missing))")
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
