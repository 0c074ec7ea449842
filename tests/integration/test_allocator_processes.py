"""Sampling processes keep freed blocks for reuse (graphstore.modes.graph_store.allocator): a
block of a few MiB freed and allocated again is not page-faulted in again, unless the user set
glibc's threshold in the environment, which wins. A second interpreter each: the allocator's
settings are process-wide."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]

_PROBE = """
import resource, sys
import numpy as np
from graphstore.modes.graph_store.allocator import use_sampling_allocator

use_sampling_allocator()
np.ones(1 << 20, np.float32)  # first touch of the heap's pages
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    block = np.ones(1 << 20, np.float32)  # 4 MiB: 1024 pages
    del block
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 50)
"""


def _faults_per_block(tmp_path: Path, **env: str) -> int:
    script = tmp_path / "probe.py"
    script.write_text(_PROBE)
    out = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True,
                         timeout=120, env={"PYTHONPATH": str(REPO), "PATH": os.environ["PATH"],
                                           **env})
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def test_a_sampling_process_reuses_freed_blocks_and_a_users_threshold_wins(tmp_path):
    reused = _faults_per_block(tmp_path)
    mapped = _faults_per_block(tmp_path, MALLOC_MMAP_THRESHOLD_=str(1 << 20))
    assert reused < 64, f"{reused} page faults per 4 MiB block allocated again"
    # mapped on its own each time: every page faulted in again (the kernel may map a few pages
    # per fault: 1024 pages took ~500 faults here)
    assert mapped >= 256, f"the user's 1 MiB threshold was not kept: {mapped} faults per block"
