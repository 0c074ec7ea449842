"""The run folder layout (graphstore.formats.run_paths.RunPaths), the run-id rule (run.json first, the folder
name only for a folder without one) and the one choice of a stage's config sections: the tests that
start processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_run_paths.py: unit tests start no process."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
import pytest
import yaml
from graphstore.config import load_config_pair
from graphstore.runtime.errors import UsageError
from graphstore.formats.run_paths import RUN_RECORD, RunPaths, read_run_id, read_run_record
from graphstore.config.stage import stage_resources, stage_section
from tests.unit.test_run_paths import (  # noqa: F401 (fixtures among them)
    REPO,
)

pytestmark = [pytest.mark.integration]


def test_run_paths_imports_no_torch():
    code = ("import sys, graphstore.formats.run_paths, graphstore.config.stage; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO, timeout=120).returncode == 0
