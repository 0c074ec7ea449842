"""GLT's sampling workers start from a preloaded forkserver (graphstore.runtime.processes): a second
interpreter that starts them (moved from ``tests/unit/test_processes.py``: unit tests start no
process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]


REPO = Path(__file__).resolve().parents[2]


_CODE = """
import os, sys

def child(q):
    q.put((os.getppid(), 'graphlearn_torch' in sys.modules))

if __name__ == '__main__':
    from graphstore.dataset.glt_adapter import prepare_sampling_server as p
    p(1.0); p(1.0)
    from graphlearn_torch.distributed import dist_sampling_producer as d
    ctx = d.mp.get_context('spawn')
    q = ctx.Queue()
    w = ctx.Process(target=child, args=(q,))
    w.start()
    ppid, preloaded = q.get(timeout=60)
    w.join(timeout=60)
    print(ctx.get_start_method(), d.mp.get_context('fork').get_start_method(),
          callable(d.mp.Value), ppid != os.getpid(), preloaded, w.exitcode)
"""


def test_glt_sampling_workers_start_from_a_preloaded_forkserver(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(_CODE)
    out = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True,
                         timeout=180, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["forkserver", "fork", "True", "True", "True", "0"]


_LAZY = """
import os, time

def children():
    # how many of this process's children are a forkserver
    with open(f'/proc/{os.getpid()}/task/{os.getpid()}/children') as f:
        pids = f.read().split()
    return sum(b'forkserver' in open(f'/proc/{p}/cmdline', 'rb').read() for p in pids)

if __name__ == '__main__':
    from graphstore.dataset.glt_adapter import prepare_sampling_server
    prepare_sampling_server(1.0)
    from graphlearn_torch.distributed import dist_sampling_producer as d
    before = (children(), d.mp.started)
    d.mp.get_context('spawn')
    deadline = time.monotonic() + 30  # the child shows its own command line once it has exec'd
    while children() == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    print(*before, children(), d.mp.started)
"""


def test_the_forkserver_starts_with_the_first_glt_producer_not_with_the_session(tmp_path):
    """A storage session prepares GLT's sampling server but starts no forkserver: one is started
    (and preloads GLT, ~3 s of CPU) only when a GLT loader's producer asks for it; the
    partitioned sampler never does."""
    script = tmp_path / "lazy.py"
    script.write_text(_LAZY)
    out = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True,
                         timeout=180, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "False", "1", "True"]
