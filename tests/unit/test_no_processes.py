"""tests/unit/conftest.py refuses every way of starting a process inside a unit test."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

import pytest



def _noop() -> None:
    pass


@pytest.mark.parametrize("start", [
    lambda: subprocess.run([sys.executable, "-c", "pass"], check=True),
    lambda: subprocess.Popen(["true"]),
    lambda: os.system("true"),
    lambda: os.fork(),
    lambda: multiprocessing.get_context("spawn").Process(target=_noop).start(),
    lambda: multiprocessing.get_context("fork").Process(target=_noop).start(),
], ids=["subprocess.run", "Popen", "os.system", "os.fork", "mp spawn", "mp fork"])
def test_a_unit_test_cannot_start_a_process(start):
    with pytest.raises(RuntimeError, match="move this test to tests/integration"):
        start()
