"""The backend doctor: real probes on this machine, and the --require-* exit codes: the tests that
start processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_doctor.py: unit tests start no process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
import pytest
from graphstore.tools.doctor import EXPECTED_2HOP, failed_requirements
from tests.unit.test_doctor import (  # noqa: F401 (fixtures among them)
    _doctor,
    report,
)

pytestmark = [pytest.mark.integration]


def test_require_flags_exit_1_with_the_fix(tmp_path, report):
    ok = _doctor(tmp_path, "--require-glt", "--require-neighbor-backend")
    assert ok.returncode == 0, ok.stderr
    if not report["torch"]["cuda_available"]:
        res = _doctor(tmp_path, "--require-cuda")
        assert res.returncode == 1
        assert "CUDA is not available" in res.stderr and "NVIDIA GPU" in res.stderr
        assert json.loads(res.stdout)["requirements_failed"]


def test_help_documents_the_flags(tmp_path):
    res = _doctor(tmp_path, "--help")
    assert res.returncode == 0
    for flag in ("--require-neighbor-backend", "--require-glt", "--require-cuda", "writes no files"):
        assert flag in res.stdout
