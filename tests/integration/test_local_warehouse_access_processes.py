"""The local warehouse with other processes and bad paths: exports and readers at the same time (a
bounded wait, never a damaged file), a folder or file that cannot be a warehouse, node ids typed by
a user, and the exit codes of ``components.export`` and ``pipeline neighbors``: the tests that
start processes (a command line, a second interpreter, workers). The others are in
tests/unit/test_local_warehouse_access.py: unit tests start no process."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator
import duckdb
import pytest
from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.export import export_run, local_warehouse
from graphstore.export.local_warehouse import LocalWarehouse
from tests.embedding_runs import REPO, build_graph, make_run
from tests.unit.test_local_warehouse_access import (  # noqa: F401 (fixtures among them)
    graph,
)

pytestmark = [pytest.mark.integration]


HOLDER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=sys.argv[2] == "ro")
print("holding", flush=True)
sys.stdin.read()  # until the test closes stdin
con.close()
"""


def _command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def _follow(proc: subprocess.Popen, needle: str, seen: threading.Event, lines: list[str]) -> None:
    for line in proc.stderr:
        lines.append(line)
        if needle in line:
            seen.set()


def _rows(path: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


@contextlib.contextmanager
def held(path: Path, *, read_only: bool) -> Iterator[subprocess.Popen]:
    """Another process holding the warehouse file open until the block ends."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), "ro" if read_only else "rw"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "holding"
        yield proc
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0


def test_export_waits_a_bounded_time_for_a_reader_then_fails_naming_it(graph, tmp_path, monkeypatch):
    task = graph["task"]
    export_run(task, str(make_run(graph, tmp_path, "r1")), node_types=["user"])
    wh = tmp_path / "warehouse" / "warehouse.duckdb"
    before = _rows(wh, "SELECT * FROM embeddings_user ORDER BY node_id")
    monkeypatch.setattr(local_warehouse, "LOCK_WAIT_S", 1.0, raising=False)
    run2 = make_run(graph, tmp_path, "r2", scale=2.0, finished="2026-11-02T00:00:00+00:00")
    with held(wh, read_only=True) as reader:
        t0 = time.monotonic()
        with pytest.raises(RuntimeFailure, match=rf"warehouse.duckdb is in use by another process "
                                                 rf"\(PID {reader.pid}\).*waited 1 s for it"):
            export_run(task, str(run2), node_types=["user"])
        assert time.monotonic() - t0 >= 1.0
    assert _rows(wh, "SELECT * FROM embeddings_user ORDER BY node_id") == before
    export_run(task, str(run2), node_types=["user"])  # free again: it goes through
    n = len(graph["raw"]["user"])
    assert _rows(wh, "SELECT run_id, count(*) FROM embeddings_user GROUP BY 1 ORDER BY 1") == [
        ("r1", n), ("r2", n)]


def test_two_exports_and_a_reader_started_while_the_file_is_held_all_wait_and_succeed(
        graph, tmp_path):
    task = graph["task"]
    tp = graph["root"] / "task.yaml"
    export_run(task, str(make_run(graph, tmp_path, "r0")), node_types=["user"])
    wh = tmp_path / "warehouse" / "warehouse.duckdb"
    runs = [make_run(graph, tmp_path, name, scale=s, finished=f"2026-11-0{d}T00:00:00+00:00")
            for name, s, d in (("r1", 2.0, 2), ("r2", 3.0, 3))]
    commands = [[sys.executable, "-m", "components.export", "--task-config", str(tp),
                 "--run-dir", str(run), "--node-type", "user"] for run in runs]
    commands.append([sys.executable, "-m", "pipeline", "neighbors", "--task-config", str(tp),
                     "--run-dir", str(runs[0]), "--node-type", "user", "--k", "2",
                     "--node-id", str(graph["raw"]["user"][3])])
    with held(wh, read_only=False):
        procs = [subprocess.Popen(c, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for c in commands]
        try:
            waiting = [(threading.Event(), []) for _ in procs]
            readers = [threading.Thread(target=_follow, daemon=True,
                                        args=(p, "is in use by another process", *w))
                       for p, w in zip(procs, waiting)]
            for r in readers:
                r.start()
            deadline = time.monotonic() + 120
            for proc, (seen, lines) in zip(procs, waiting):  # each one really met the lock
                while not seen.wait(0.2):
                    assert proc.poll() is None, "".join(lines)
                    assert time.monotonic() < deadline, "".join(lines)
        except BaseException:
            for p in procs:
                p.kill()
            raise
    outs = [p.communicate(timeout=120)[0] for p in procs]
    for r in readers:
        r.join(timeout=30)
    for proc, (_, lines), out in zip(procs, waiting, outs):
        assert proc.returncode == 0, "".join(lines)
        assert "Traceback" not in "".join(lines)
    n = len(graph["raw"]["user"])
    assert _rows(wh, "SELECT run_id, count(*) FROM embeddings_user GROUP BY 1 ORDER BY 1") == [
        ("r0", n), ("r1", n), ("r2", n)]
    assert _rows(wh, "SELECT DISTINCT run_id FROM embeddings_user_latest") == [("r2",)]
    # each run holds its own embeddings: node i is scale * [i, i+1, ...]
    for run_id, scale in (("r0", 1.0), ("r1", 2.0), ("r2", 3.0)):
        first = _rows(wh, f"SELECT embedding FROM embeddings_user WHERE run_id = '{run_id}' "
                          f"AND node_id = '{graph['raw']['user'][1]}'")
        assert first == [([scale * x for x in (1.0, 2.0, 3.0, 4.0)],)]
    assert len(outs[2].splitlines()) == 2  # the reader printed its two neighbours


def test_command_exit_codes_for_user_mistakes(graph, tmp_path):
    tp = str(graph["root"] / "task.yaml")
    run = make_run(graph, tmp_path, "r1")
    unknown = _command("components.export", "--task-config", tp, "--run-dir", str(run),
                       "--node-type", "unknown")
    assert unknown.returncode == 2, unknown.stderr
    assert "node type 'unknown' is not in graphMetadata.nodeTypes (user, item)" in unknown.stderr
    missing = _command("components.export", "--task-config", tp, "--run-dir",
                       str(tmp_path / "no-such-run"))
    assert missing.returncode == 2, missing.stderr
    assert f"--run-dir {tmp_path / 'no-such-run'}: no such folder" in missing.stderr
    ok = _command("components.export", "--task-config", tp, "--run-dir", str(run))
    assert ok.returncode == 0, ok.stderr
    for node_id in ("abc", ""):
        bad = _command("pipeline", "neighbors", "--task-config", tp, "--run-dir", str(run),
                       "--node-type", "item", "--node-id", node_id)
        assert bad.returncode == 2, bad.stderr
        assert "node ids of embeddings_item are integers" in bad.stderr
    (tmp_path / "warehouse" / "warehouse.duckdb").write_bytes(b"garbage" * 100)
    garbage = _command("pipeline", "neighbors", "--task-config", tp, "--run-dir", str(run),
                       "--node-type", "item", "--node-id", str(graph["raw"]["item"][0]))
    assert garbage.returncode == 2, garbage.stderr
    assert "warehouse.duckdb cannot be opened as the local warehouse" in garbage.stderr
    for result in (unknown, missing, bad, garbage):
        assert "Traceback" not in result.stderr
