"""``python -m pipeline run``: the whole pipeline DAG on this machine (``kfp.local``).

    python -m pipeline run --task-config T --resource-config R [--run-root runs] [--run-id ID]
                           [--start-at STAGE] [--stop-after STAGE] [--set key=value ...]

Executes the same pipeline function that ``compile`` writes for Vertex AI (pipeline/dag.py)
through KFP's local SubprocessRunner: same stages, same order; graph-store stages run on the local
launcher; export goes to the warehouse ``exportConfig`` names. Every run gets a folder
``<run-root>/<run-id>`` (``--run-root`` may be ``gs://bucket/prefix``);
``--start-at`` with the ``--run-id`` of an earlier run resumes it without redoing earlier stages.
At the end: seconds per stage, where the outputs are, and the top-5 neighbours of one node read
back from the warehouse. Exit 0, 2 (bad configs or arguments) or 1 (a stage failed: its name
and the end of its error are printed).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
import threading
import time
import warnings
from typing import Iterator, Mapping, TextIO

from graphstore.io import uris
from graphstore.runtime.errors import RuntimeFailure, UsageError
from graphstore.formats.run_paths import RunPaths
from graphstore.formats.stage_records import StageRecord, read_records


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline.stages import STAGES

    parser.add_argument("--task-config", required=True, help="task config YAML")
    parser.add_argument("--resource-config", required=True, help="resource config YAML (local)")
    parser.add_argument("--run-root", default="runs", help="folder or gs:// prefix holding one "
                        "folder per run (default: runs)")
    parser.add_argument("--run-id", help="run id (default: the UTC time and a random suffix, "
                        "e.g. 20261129T031500Z-3f9a; letters, digits, '.', '_', '-'); a run "
                        "folder that already holds a run is refused unless --start-at is given")
    parser.add_argument("--start-at", default=None, choices=STAGES,
                        help=f"first stage (default {STAGES[0]}); giving it with the --run-id of "
                             "an earlier run resumes that run in its folder")
    parser.add_argument("--stop-after", default=STAGES[-1], choices=STAGES)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value (dotted path), repeatable")
    parser.add_argument("--quiet-kfp", action="store_true",
                        help="write KFP's task logs (executor inputs, every process's output) to "
                             "<run-root>/_kfp/<run-id>.log instead of the terminal, and print one "
                             "line per stage as it starts and ends")


def _check_resume(run_dir: str, stages: tuple[str, ...]) -> None:
    """A run that starts after ``partition`` must find the earlier stages' outputs."""
    from graphstore.formats.shards.reader import is_complete

    paths = RunPaths(run_dir)
    need = {"train": paths.shards, "infer": paths.model, "export": paths.task_config}.get(stages[0])
    found = need and (is_complete(need) if need == paths.shards else uris.exists(need))
    if need and not found:
        raise UsageError(f"--start-at {stages[0]} needs {need} from an earlier run: give that "
                         "run's --run-id (and --run-root)")


def _record_line(r: StageRecord) -> str:
    """One stage record as a summary line: stage, status, seconds and what it produced."""
    if r.status == "running":
        what = f" ({r.node_type})" if r.node_type else ""
        return f"  {r.stage:<9} running{what}"
    extra = ""
    if r.stage == "partition":
        extra = (f"{'?' if r.edges is None else r.edges} edges -> "
                 f"{'?' if r.partitions is None else r.partitions} partitions")
    elif r.stage == "train":
        extra = _train_metrics(r.metrics)
    elif r.stage == "export":
        extra = f"{r.node_type}: {r.rows} rows -> {r.table}"
    return f"  {r.stage:<9} {r.status:<6} {r.seconds or 0:>6.1f} s  {extra}".rstrip()


def _train_metrics(test: Mapping) -> str:
    """``test MRR 0.210 (popularity 0.028, bpr 0.019, lightgcn 0.018), hits@10 0.55 (0.07, ...)``:
    the model's test metrics, then each baseline's in the order metrics.json lists them."""
    model = test.get("model", {})
    if not model:
        return ""
    baselines = [(k, v) for k, v in test.items()
                 if k != "model" and isinstance(v, dict) and "mrr" in v]
    mrr = ", ".join(f"{k} {v['mrr']:.3f}" for k, v in baselines)
    hits = ", ".join(f"{v.get('hits@10', 0):.3f}" for _, v in baselines)
    return (f"test MRR {model.get('mrr', 0):.3f}" + (f" ({mrr})" if mrr else "")
            + f", hits@10 {model.get('hits@10', 0):.3f}" + (f" ({hits})" if hits else ""))


def _summary(run_dir: str, run_id: str, stages: tuple[str, ...], seconds: float) -> list[str]:
    lines = [f"run {run_id}: {', '.join(stages)} in {seconds:.1f} s"]
    records = read_records(run_dir)
    lines += [_record_line(r) for r in records]
    lines += [f"run report: {r.report}" for r in records if r.report]
    return lines


def _report_stages(run_dir: str, out: TextIO, stop: threading.Event, poll_s: float) -> None:
    """Print each stage record of the run once per status, as it appears (until ``stop``)."""
    seen: set[tuple[str, str, str]] = set()
    while True:
        finished = stop.is_set()
        try:
            records = read_records(run_dir)
        except Exception:  # noqa: BLE001 - a record half-written by a stage: read it next time
            records = []
        for r in records:
            key = (r.stage, r.node_type, r.status)
            if key not in seen:
                seen.add(key)
                print(_record_line(r), file=out, flush=True)
        if finished:  # the read after ``stop`` was the last one
            return
        stop.wait(poll_s)


@contextlib.contextmanager
def _sigterm_reaches_the_task() -> Iterator[None]:
    """While the DAG runs, SIGTERM to this process is passed on to the task running now.

    kfp.local runs each task as a child process behind two shells (``sh -c``, ``sh -ec``), and no
    shell passes a signal on: a SIGTERM to ``pipeline run`` alone (a scheduler's timeout, a
    supervisor, ``kill``) ended this process and left the stage running, with its storage and
    compute processes (seen with the ``xlarge`` run, 2026-12-05). Ctrl-C was never affected: the
    terminal signals the whole foreground process group. Here the task's kfp executor (a
    descendant running ``kfp.dsl.executor_main``) gets the SIGTERM: in a train or infer task the
    graph-store launcher then ends its processes (pipeline.launch); the shells are left to wait
    for it, so KFP sees the task fail only once that is done, with the stage's record written,
    and the run ends as a failed task does (the stage named, exit 1). Between two tasks the run
    stops at once (exit 1)."""
    import signal

    import psutil

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigterm(_signum: int, _frame: object) -> None:
        signalled = 0
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "kfp.dsl.executor_main" in child.cmdline():
                    child.terminate()
                    signalled += 1
        if not signalled:  # between two tasks: nothing to wait for
            raise RuntimeFailure("interrupted by SIGTERM")

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _quiet_kfp(log_path: str, run_dir: str) -> Iterator[None]:
    """Send everything printed while the DAG runs (KFP's task logs) to ``log_path``; meanwhile
    print one line per stage status to the terminal."""
    out = sys.stdout
    stop = threading.Event()
    poll_s = 2.0 if uris.is_gcs(run_dir) else 0.5
    watcher = threading.Thread(target=_report_stages, args=(run_dir, out, stop, poll_s),
                               name="stage-progress", daemon=True)
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    print(f"KFP task logs: {log_path}", file=out, flush=True)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.WARNING)  # KFP's orchestrator notes ("Skipping conditional task ...")
    with open(log_path, "w") as log, contextlib.redirect_stdout(log), warnings.catch_warnings():
        # "Task 'x': settings ['display_name'] have no effect in the current local environment"
        warnings.filterwarnings("ignore", message=".*have no effect", category=UserWarning)
        watcher.start()
        try:
            yield
        finally:
            stop.set()
            watcher.join(timeout=30)
            root.setLevel(level)


def _neighbours(run_dir: str, run_id: str, task, project: str | None) -> list[str]:
    """Top-5 neighbours of the first node of the first exported type in ``run_id``'s rows (from
    the warehouse)."""
    from graphstore.export import open_warehouse
    from graphstore.export.names import table_name

    if task.inferencer is None:
        return []
    node_type = task.inferencer.node_types[0]
    warehouse = open_warehouse(task, run_dir, project)
    table = table_name(task.export.table_prefix, node_type)
    first = warehouse.first_node_id(table, run_id)
    among = table
    sup = task.supervision_edge_types[0] if task.supervision_edge_types else None
    if sup is not None and sup.src_node_type == node_type and sup.dst_node_type in task.inferencer.node_types:
        among = table_name(task.export.table_prefix, sup.dst_node_type)
    top = warehouse.neighbors(table, str(first), 5, among=among, run_id=run_id)
    lines = [f"top-5 of {among} for {node_type} {first!r} (warehouse {warehouse.path}):"]
    lines += [f"  {node_id!r:>24}  score {score:.4f}" for node_id, score in top]
    return lines


def run(args: argparse.Namespace) -> int:
    from graphstore.config import load_config_pair
    from graphstore.formats.run_ids import RunId
    from graphstore.config.stage import STAGES as GRAPH_STORE_STAGES
    from graphstore.config.stage import stage_resources
    from pipeline.stages import STAGES, check_run_folder, dump_yaml, stage_range

    stages = stage_range(args.start_at or STAGES[0], args.stop_after)
    resume = args.start_at is not None
    given = None if args.run_id is None else RunId.parse(args.run_id, "--run-id")
    task, res = load_config_pair(args.task_config, args.resource_config, tuple(args.overrides))
    for stage in GRAPH_STORE_STAGES:
        if stage in stages and stage_resources(res, stage).kind != "local":
            raise UsageError(f"{args.resource_config}: the {stage} stage has Vertex AI resources; "
                             "`pipeline run` needs a local resource config (submit runs on Vertex)")
    run_root = args.run_root if uris.is_gcs(args.run_root) else os.path.abspath(args.run_root)
    run_id = given or RunId.new()  # named here: the run's folder and log are known before it starts
    run_dir = RunPaths.of_run(run_root, run_id).run_dir
    check_run_folder(run_dir, resume=resume)  # fail fast; the freeze task claims it atomically
    _check_resume(run_dir, stages)
    from kfp import local

    from pipeline.dag import build_pipeline

    # KFP's own local bookkeeping stays on this machine (a temporary folder for gs:// run roots)
    kfp_root = (tempfile.mkdtemp(prefix="kfp-local-") if uris.is_gcs(run_root)
                else os.path.join(run_root, "_kfp"))
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=kfp_root,
               raise_on_error=True)
    pipeline_fn = build_pipeline()
    t0 = time.perf_counter()
    print(f"pipeline run: {run_id}: {' -> '.join(stages)} (run folder {run_dir})", flush=True)
    quiet = (_quiet_kfp(os.path.join(kfp_root, f"{run_id}.log"), run_dir) if args.quiet_kfp
             else contextlib.nullcontext())
    try:
        with quiet, _sigterm_reaches_the_task():
            pipeline_fn(task_config=dump_yaml(task.to_dict()),
                        resource_config=dump_yaml(res.to_dict()), run_root=run_root,
                        run_id=str(run_id), start_at=stages[0], stop_after=stages[-1], resume=resume)
    except Exception as exc:  # noqa: BLE001 - KFP reports a failed task as a plain exception
        records = read_records(run_dir, skip_unreadable=True)
        # a task killed before it could record its end is left "running"
        failed = ([r for r in records if r.status == "failed"]
                  or [r for r in records if r.status == "running"])
        if not failed:
            raise RuntimeFailure(f"pipeline run {run_id} failed: {exc}") from None
        r = failed[0]
        tail = "\n".join(r.error.splitlines()[-25:]) or "(its process ended before it recorded why)"
        print("\n".join(_summary(run_dir, run_id, stages, time.perf_counter() - t0)),
              file=sys.stderr)
        after = f"after {r.seconds} s" if r.seconds is not None else "before it finished"
        raise RuntimeFailure(f"stage {r.stage} failed {after} "
                             f"(run {run_id}; resume with --run-id {run_id} --start-at "
                             f"{r.stage}):\n{tail}") from None
    print("\n".join(_summary(run_dir, run_id, stages, time.perf_counter() - t0)), flush=True)
    if "export" in stages:
        print("\n".join(_neighbours(run_dir, run_id, task, res.shared.project)), flush=True)
    return 0
