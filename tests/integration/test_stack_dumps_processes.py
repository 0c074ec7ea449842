"""A sampling worker forked from the preloaded forkserver writes its threads' stacks to its
stderr when a stalled fetch asks (graphstore.runtime.stack_dumps), and keeps running."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PARKED = '''
import sys, time

def parked_in_a_named_function(ready):
    ready.set()
    time.sleep(120)

if __name__ == "__main__":  # (the forkserver imports this file too: nothing above imports ours)
    import torch.multiprocessing
    from graphstore.runtime import stack_dumps
    from graphstore.runtime.processes import PreloadedMultiprocessing

    mp = PreloadedMultiprocessing(torch.multiprocessing)
    assert mp.answers_stack_dumps
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    worker = ctx.Process(target=parked_in_a_named_function, args=(ready,), daemon=True)
    worker.start()
    assert ready.wait(60), "the worker never started"
    time.sleep(0.2)
    assert stack_dumps.request_dump(worker.pid)
    time.sleep(1.0)
    print("alive after the dump:", worker.is_alive(), flush=True)
    worker.terminate()
    worker.join(10)
'''


@pytest.mark.timeout(180)
def test_a_forkserver_worker_writes_its_stacks_on_request_and_lives_on(tmp_path: Path) -> None:
    script = tmp_path / "parked.py"
    script.write_text(PARKED)
    proc = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True,
                          text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "alive after the dump: True" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    assert 'in parked_in_a_named_function' in proc.stderr, proc.stderr[-3000:]
