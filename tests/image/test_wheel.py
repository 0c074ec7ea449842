"""The package as a wheel, on its own: the wheel `make image` built from this tree
(build/image/dist/) installs into a fresh virtual environment from the image's wheelhouse alone
(no index: the dependencies pyproject.toml declares resolve to the locked stack; the ``[ray]``
extra is left out, as ``validate`` does not need it, and nothing is byte-compiled: minutes saved),
and its console
script answers ``--help`` and validates the example configs, run away from the repository.

Skipped like the other image tests when no image is built for this working tree (``make image``
builds the wheel and the wheelhouse); a failure with ``--require-image`` (CI).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.image.containers import REPO, why_no_image

pytestmark = [pytest.mark.image, pytest.mark.slow]

BUILD = REPO / "build" / "image"


@pytest.fixture(scope="module")
def venv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = why_no_image()
    if reason and request.config.getoption("--require-image"):
        pytest.fail(f"--require-image: {reason}")
    if reason:
        pytest.skip(reason)
    (wheel,) = sorted((BUILD / "dist").glob("graphstore_pipeline-*.whl"))
    env = tmp_path_factory.mktemp("wheel") / "venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(env)],
                   check=True, timeout=300)
    pip_env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_CACHE_DIR": "1",
               "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    install = subprocess.run(
        [str(env / "bin" / "pip"), "install", "-q", "--no-compile", "--no-index", "--find-links",
         str(BUILD / "wheelhouse"), "--find-links", str(REPO / "wheels"), str(wheel)],
        env=pip_env, capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-3000:]
    return env


def _run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(venv / "bin" / "graphstore-pipeline"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.timeout(1200)
def test_the_wheel_installs_from_the_wheelhouse_and_its_console_script_runs(venv, tmp_path):
    found = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import graphstore, pipeline; print(graphstore.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr[-2000:]
    assert found.stdout.strip().startswith(str(venv)), found.stdout  # not this checkout's
    shown = _run(venv, "--help", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "validate" in shown.stdout and "submit" in shown.stdout, shown.stdout
    ok = _run(venv, "validate", "--task-config", str(REPO / "configs" / "task_hetero.yaml"),
              "--resource-config", str(REPO / "configs" / "resource_local.yaml"), cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]
    bad = _run(venv, "validate", "--task-config", str(tmp_path / "missing.yaml"),
               "--resource-config", str(REPO / "configs" / "resource_local.yaml"), cwd=tmp_path)
    assert bad.returncode == 2, bad.stdout[-2000:] + bad.stderr[-2000:]
