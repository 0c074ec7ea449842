"""Unit tests start no process: a test that tries fails with the reason.

Every way Python starts a process (``subprocess`` and everything built on it, ``os.fork`` and its
relatives, ``os.posix_spawn``, ``multiprocessing`` of any start method, ``os.system``) raises
:class:`ProcessStartInUnitTest` inside ``tests/unit/``. Tests that need real processes (the
launcher, storage and compute, Ray, a browser, a second interpreter to check imports) belong in
``tests/integration/``: the split keeps ``pytest tests/unit`` a quick loop, and the slow part of the
suite where it can be seen.
"""

from __future__ import annotations

import multiprocessing.process
import os
import subprocess

import matplotlib.font_manager  # noqa: F401  (its first import on a machine runs fc-list to build
#                                  the font cache: done here, before the guard, whichever test
#                                  of the run draws first)
import numpy.testing  # noqa: F401  (its first import runs lscpu: done here, before the guard)
import pytest


class ProcessStartInUnitTest(RuntimeError):
    """A unit test tried to start a process."""


def _refuse(what: str):
    def refuse(*_args, **_kwargs):
        raise ProcessStartInUnitTest(
            f"tests/unit starts no process ({what} was called): move this test to "
            "tests/integration/ (tests/unit/conftest.py)")
    return refuse


@pytest.fixture(autouse=True)
def _no_process_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse("subprocess.Popen"))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start",
                        _refuse("multiprocessing Process.start"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "spawnv", "spawnve",
                 "execv", "execve"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse(f"os.{name}"))
