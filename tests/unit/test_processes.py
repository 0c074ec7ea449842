"""Worker processes started from preloaded forkservers (graphstore.processes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch.multiprocessing as tmp

from graphstore.processes import start_workers

REPO = Path(__file__).resolve().parents[2]


def _write_rank(rank: int, folder: str, word: str) -> None:
    import os

    Path(folder, f"rank{rank}").write_text(f"{word} {os.getppid()}")


def _fail_on_rank_one(rank: int) -> None:
    if rank == 1:
        raise ValueError("rank one refuses")


def test_every_rank_runs_with_its_arguments_in_a_child_of_the_forkserver(tmp_path):
    start_workers(_write_rank, (str(tmp_path), "hello"), 3, preload=("json",))
    texts = [(tmp_path / f"rank{r}").read_text().split() for r in range(3)]
    assert [t[0] for t in texts] == ["hello"] * 3
    parents = {int(t[1]) for t in texts}
    # forked by the forkserver, not by this process (a spawn would have this process as parent)
    assert len(parents) == 1 and parents != {__import__("os").getpid()}


def test_a_failing_rank_raises_in_the_parent_with_its_error():
    with pytest.raises(tmp.ProcessRaisedException, match="rank one refuses"):
        start_workers(_fail_on_rank_one, (), 2, preload=("json",))


def test_glt_sampling_workers_start_from_the_forkserver():
    code = ("from graphstore.processes import preload_glt_sampling_workers as p; p(); p(); "
            "from graphlearn_torch.distributed import dist_sampling_producer as d; "
            "print(d.mp.get_context('spawn').get_start_method(), d.mp.get_context('fork')"
            ".get_start_method(), callable(d.mp.Value))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["forkserver", "fork", "True"]
