"""Run a real process until it reaches a named pause point (graphstore.runtime.pause_points), then SIGKILL
it there. Shared by the crash-safety tests (local folders and the GCS emulator)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from graphstore.runtime.env import PAUSE_AT

REPO = Path(__file__).resolve().parents[1]


def kill_at(point: str, argv: list[str], flag_dir: Path, *, timeout_s: float = 120.0,
            env: dict[str, str] | None = None) -> str:
    """Start ``python argv...`` paused at ``point``; SIGKILL it once it gets there. Returns its
    output. Fails (AssertionError) when the process ends or times out before the point."""
    flag = flag_dir / f"paused-{point.replace(':', '_')}"
    flag.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {}), PAUSE_AT: f"{point}={flag}"})
    deadline = time.monotonic() + timeout_s
    try:
        while not flag.exists():
            if proc.poll() is not None:
                raise AssertionError(f"exited {proc.returncode} before pause point {point}:\n"
                                     f"{proc.stdout.read()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"pause point {point} not reached in {timeout_s} s")
            time.sleep(0.05)
        assert int(flag.read_text()) == proc.pid
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
        return proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
