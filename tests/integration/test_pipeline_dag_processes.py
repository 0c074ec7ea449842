"""The KFP pipeline: compiled structure, stage selection, placeholders and frozen configs: the tests
that start processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_pipeline_dag.py: unit tests start no process."""

from __future__ import annotations

import subprocess
import sys
import pytest
from graphstore.runtime.errors import UsageError
from graphstore.formats.stage_records import read_records
from pipeline.stages import freeze
from tests.unit.test_pipeline_dag import (  # noqa: F401 (fixtures among them)
    REPO,
)

pytestmark = [pytest.mark.integration]


def test_pipeline_module_imports_no_torch():
    code = ("import sys, pipeline.dag, pipeline.stages, pipeline.cli_run, pipeline.cli_neighbors, "
            "graphstore.export; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("bad", ["../../etc", "a/b", "..", "", " r1", "r" * 129, "x;rm"])
def test_run_ids_are_checked_where_they_enter(tmp_path, bad):
    """``pipeline run`` and ``submit`` refuse a bad --run-id before anything runs (exit 2), and so
    does the freeze task itself."""
    res = (REPO / "configs" / "resource_local.yaml").read_text()
    task = (REPO / "configs" / "task_hetero.yaml").read_text()
    if bad:
        with pytest.raises(UsageError, match="run_id"):
            freeze(task, res, str(tmp_path / "runs"), bad)
    if bad not in ("../../etc", ""):
        return  # the CLIs share RunId.parse; two values are enough to see them use it
    cmds = [["run", "--run-root", str(tmp_path / "runs")]]
    if bad:  # submit's --run-id "" means "derive one when the run starts"
        cmds.append(["submit", "--image", "img", "--run-root", "gs://b/runs", "--dry-run"])
    for argv in cmds:
        proc = subprocess.run(
            [sys.executable, "-m", "pipeline", *argv, "--task-config",
             str(REPO / "configs" / "task_hetero.yaml"), "--resource-config",
             str(REPO / "configs" / "resource_local.yaml"), "--run-id", bad],
            cwd=REPO, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, (argv, proc.stderr[-1500:])
        assert "--run-id" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "etc").exists()


def test_a_killed_record_write_leaves_the_previous_record(tmp_path):
    """Stage records and run records are replaced whole: SIGKILL between writing the new text and
    the rename leaves the old record readable."""
    from tests.kill_points import kill_at

    run = tmp_path / "run"
    code = ("import sys; from pipeline.stages import recorded\n"
            "with recorded(sys.argv[1], 'train'):\n    pass\n")
    kill_at("write_text:train.json", ["-c", code, str(run)], tmp_path)
    assert not (run / "_stages" / "train.json").exists()  # the first write never landed
    subprocess.run([sys.executable, "-c", code, str(run)], cwd=REPO, check=True, timeout=120)
    before = read_records(str(run))
    assert before[0].status == "ok"
    kill_at("write_text:train.json", ["-c", code, str(run)], tmp_path)
    assert read_records(str(run)) == before
