"""Run commands inside the built image (``scripts/image.sh run``: a fresh buildah working container
per command, chroot isolation, the host's network, so processes of separate containers reach each
other on 127.0.0.1 as replicas of one CustomJob do on their VPC).

The record of the last good build, ``build/image/image.json`` (scripts/image.sh), says which image;
:func:`why_no_image` says why the image tests cannot run (no buildah, no record, or an image built
from other sources than the working tree's), so they skip with that reason.

Every command runs in its own session; a timeout or a failing peer ends the whole session
(SIGTERM, then SIGKILL), and every exit code is checked by the callers.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

REPO = Path(__file__).resolve().parents[2]
IMAGE_SH = REPO / "scripts" / "image.sh"
RECORD = REPO / "build" / "image" / "image.json"
TERM_GRACE_S = 10.0


def why_no_image() -> str | None:
    """None when the built image matches this working tree, else the reason to skip."""
    if shutil.which("buildah") is None:
        return "buildah is not installed: run `make image` (it installs buildah and builds the image)"
    if not RECORD.is_file():
        return f"no image built ({RECORD.relative_to(REPO)} missing): run `make image`"
    record = json.loads(RECORD.read_text())
    now = subprocess.run([str(IMAGE_SH), "sources-hash"], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout.strip()
    if record.get("sources_sha256") != now:
        return (f"the image {record.get('image')} was built from other sources than this working "
                "tree: run `make image` (warm: seconds)")
    return None


def image_record() -> dict:
    return json.loads(RECORD.read_text())


def image_argv(command: Sequence[str], *, volumes: Sequence[Path] = (),
               env: Mapping[str, str] | None = None) -> list[str]:
    """``scripts/image.sh run`` argv; each volume is mounted at the same path inside."""
    argv = [str(IMAGE_SH), "run"]
    for volume in volumes:
        argv += ["-v", f"{volume}:{volume}"]
    for name, value in (env or {}).items():
        argv += ["-e", f"{name}={value}"]
    return [*argv, "--", *command]


def _end_session(popen: subprocess.Popen) -> None:
    """SIGTERM to the command's whole session, SIGKILL after TERM_GRACE_S."""
    for sig, wait_s in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, TERM_GRACE_S)):
        try:
            os.killpg(popen.pid, sig)
        except ProcessLookupError:
            return
        try:
            popen.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def run_in_image(command: Sequence[str], *, timeout_s: float, volumes: Sequence[Path] = (),
                 env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``command`` in the image and wait; stdout and stderr captured as text. A timeout ends
    the command's session and fails the test with its output."""
    popen = subprocess.Popen(image_argv(command, volumes=volumes, env=env), cwd=REPO,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        out, err = popen.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _end_session(popen)
        out, err = popen.communicate()
        raise AssertionError(f"{' '.join(command)[:200]}: no end within {timeout_s:g} s in the "
                             f"image\n{out[-3000:]}\n{err[-3000:]}") from None
    return subprocess.CompletedProcess(command, popen.returncode, out, err)


@dataclass
class Started:
    """One command running in the image, its output going to ``log``."""

    label: str
    popen: subprocess.Popen
    log: Path

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]


def start_in_image(label: str, command: Sequence[str], *, log: Path, volumes: Sequence[Path] = (),
                   env: Mapping[str, str] | None = None) -> Started:
    """Start ``command`` in the image in its own session (stdout and stderr into ``log``)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as fh:
        popen = subprocess.Popen(image_argv(command, volumes=volumes, env=env), cwd=REPO,
                                 stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    return Started(label, popen, log)


def wait_all(started: Sequence[Started], *, timeout_s: float) -> None:
    """Wait until every command has exited 0. At the first non-zero exit, or at the timeout, the
    rest are ended and the test fails naming each command with its exit code and log tail."""
    deadline = time.monotonic() + timeout_s
    failed: Started | None = None
    try:
        while time.monotonic() < deadline:
            codes = [s.popen.poll() for s in started]
            failed = next((s for s, c in zip(started, codes) if c not in (None, 0)), None)
            if failed is not None or all(c == 0 for c in codes):
                break
            time.sleep(0.5)
    finally:
        for s in started:
            if s.popen.poll() is None:
                _end_session(s.popen)
    codes = {s.label: s.popen.returncode for s in started}
    if failed is not None or any(c != 0 for c in codes.values()):
        why = f"{failed.label} exited {failed.popen.returncode} first" if failed else \
            f"timed out after {timeout_s:g} s"
        logs = "\n".join(f"--- {s.label} (exit {s.popen.returncode}):\n{s.tail()}" for s in started)
        raise AssertionError(f"{why}; exit codes {codes}\n{logs}")
