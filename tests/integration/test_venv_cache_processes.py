"""scripts/venv_cache.sh: a venv kept as hard links and made again in a new place (CI's fresh
clone gets .venv and .venv-emulators in seconds); real bash, a real venv."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration]


def _cache(tmp: Path, *calls: str) -> subprocess.CompletedProcess:
    script = f". {REPO / 'scripts' / 'venv_cache.sh'}; " + "; ".join(calls)
    return subprocess.run(["bash", "-c", script], cwd=tmp, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "GRAPHSTORE_CACHE": str(tmp / "cache")})


@pytest.mark.timeout(180)
def test_a_cached_venv_is_made_again_elsewhere_and_stays_apart(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "first")],
                   check=True, timeout=120)
    mine = tmp_path / "first" / "lib" / "mine.txt"
    mine.write_text("stack")
    first = _cache(tmp_path, "venv_to_cache first key1", "venv_to_cache first key1")
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("kept for new clones") == 1  # an entry is written once
    entry = tmp_path / "cache" / "key1"
    assert (entry / ".graphstore-venv-origin").read_text().strip() == str(tmp_path / "first")

    made = _cache(tmp_path, "venv_from_cache second key1")
    assert made.returncode == 0 and "second made from" in made.stdout, made.stderr
    second = tmp_path / "second"
    assert not (second / ".graphstore-venv-origin").exists()
    assert os.path.samefile(second / "lib" / "mine.txt", mine)  # hard links, no copy
    # the scripts that named the first venv name the second one
    activate = (second / "bin" / "activate").read_text()
    assert str(second) in activate and str(tmp_path / "first") not in activate
    prefix = subprocess.run([str(second / "bin" / "python"), "-c", "import sys; print(sys.prefix)"],
                            capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert prefix == str(second)
    # a file replaced in the new venv (as pip does) leaves the cache and the first venv alone
    replaced = second / "lib" / "mine.txt"
    replaced.unlink()
    replaced.write_text("changed")
    assert mine.read_text() == (entry / "lib" / "mine.txt").read_text() == "stack"

    # an existing venv is never replaced; an incomplete or missing entry is refused
    again = _cache(tmp_path, "venv_from_cache second key1 || echo refused")
    assert again.stdout.strip() == "refused" and replaced.read_text() == "changed"
    (tmp_path / "cache" / "key2").mkdir()  # no marker: a copy that did not finish
    missing = _cache(tmp_path, "venv_from_cache third key2 || echo refused")
    assert missing.stdout.strip() == "refused" and not (tmp_path / "third").exists()
