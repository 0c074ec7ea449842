"""Sampling throughput of every dataset mode, side by side in one run; per-worker memory vs size.

One generated homogeneous graph (N = E/10 nodes, E edges, 16 features), fan-out [10, 5], batch
512, edges sampled into each seed (direction "in"), every node a seed once per epoch (shuffled),
the same graph for every mode (one shard set; the replicated graph file is written from it):

  replicated_w1, replicated_w2  embedded Ray (num_cpus = cores) and 1 or 2 Ray workers (actors,
                                as the trainer's Ray Train workers), each with its share of the
                                seeds and the trainer's replicated loader (DistNeighborLoader over
                                ReplicatedDataset) sampling the memory-mapped graph file inline
                                (num_workers=0)
  replicated_w1_read1           the same, 1 Ray worker whose loader samples in 1 Ray Data read
                                task (num_workers=1; the loader's default, 0, samples inline)
  graph_store                   2 storage processes + 1 compute process through the local
                                launcher (DistNeighborLoader over RemoteDistDataset), the
                                loader's default settings
  colocated                     2 compute machines x 1 process, each sampling its own partition
                                with the partitioned sampler (its own partition in-process, the
                                other over the compute processes' RPC)
  colocated_1                   1 compute machine x 1 process holding the one partition of a
                                1-partition shard set (the same graph): colocated with one
                                worker, as replicated_w1 and graph_store's one compute process
  pyg                           torch_geometric NeighborLoader in one process (torch-sparse)
  pyg_w<cores>                  the same with num_workers = cores (persistent workers)
  dgl                           DGL 2.1.0's CPU sampler in one process, as a user writes it: per
                                batch dgl.sampling.sample_neighbors per hop (edge_dir "in") +
                                dgl.to_block + the input nodes' feature gather, over the graph
                                read from the same shards as pyg (benchmarks/_sampling_dgl.py).
                                Runs with --dgl-python (default .venv-dgl/bin/python, made by
                                benchmarks/dgl_env.sh: DGL cannot share the project venv); that
                                python absent or unusable: the row is skipped, with a printed
                                reason and a JSON warning. DGL 2.1.0 ships no graphbolt library
                                for torch 2.3, and ``import dgl`` fails loading it: the row
                                tolerates exactly that error (an import hook; module docs of
                                _sampling_dgl.py), graphbolt being unused. Its blocks' source
                                nodes include their seeds, so hop 2 samples the seeds again:
                                more edges per seed than PyG's (compare edges/s too)

Fairness: every mode's whole process tree is pinned (sched_setaffinity) to the same --cores
CPUs, every process gets OMP_NUM_THREADS = MKL_NUM_THREADS = torch threads = --threads (DGL's
OpenMP pool too: dgl.utils.set_num_threads), Ray gets num_cpus = --cores. Throughput is over the
--epochs timed epochs after --warmup untimed ones (start-up excluded; colocated: seeds summed over
both machines, per epoch over the slower). --repeats R runs every mode once, in order, R times
(interleaved); medians, min and max are reported. Sampled edges (edges/s and edges per seed, every
row): a PyG / GLT batch's ``edge_index`` columns, a DGL batch's block edges. Memory: each
process's peak RSS (VmHWM) and peak anonymous RSS (RssAnon: mapped file pages, e.g. the graph
file's page cache, aside), polled by the driver; "compute" is the largest over the processes that
consume or sample or are a compute machine's parent (not storage, not Ray's, the launcher's or
multiprocessing's own).

Results: a table with the issue's target ratios (pass / short) and --json (default
benchmarks/results/sampling.json), written whole at the end and only when every run succeeded (a
failed run stops the benchmark, exit 1, naming its log). JSON (``schema_version`` 1): ``date``,
``command``, ``git`` (commit, uncommitted code changes), ``machine`` (cpu_count, the CPUs given
each mode, versions; ``dgl_env``: the dgl row's python, dgl and torch versions, the graphbolt error
it tolerated, or null), ``load_avg_1_5_15`` before and after, ``graph``, ``fairness`` (how, and
each mode's processes), ``timing``, ``memory``, ``warnings`` (a skipped dgl row among them), ``summary`` (per scale and mode:
medians, min, max), ``ratios`` (value, target, pass / short / n/a), ``runs`` (every run, with its
process list: role, peaks, CPU seconds), ``total_seconds``. --sweep-graph-store adds graph-store rows with other loader settings
(num_workers/worker_concurrency/prefetch_size), interleaved with the rest. --profile-graph-store
runs nothing else: one graph-store run with py-spy on the storage and compute processes for one
epoch, printing where the time goes (needs py-spy and ptrace rights).

usage: python benchmarks/sampling.py [--edges 1000000] [--scales 1,4] [--repeats 3]
         [--modes pyg,dgl] [--dgl-python .venv-dgl/bin/python] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _sampling_procs as procs  # noqa: E402
from _sampling_profile import find_py_spy, profile_graph_store  # noqa: E402
from _sampling_report import print_table, results_doc  # noqa: E402

MODES_PY = Path(__file__).resolve().parent / "_sampling_modes.py"
DEFAULT_DGL_PYTHON = REPO / ".venv-dgl" / "bin" / "python"
DEFAULT_SWEEP = "1/8/8,1/16/16,2/4/4,2/8/8"


@dataclass(frozen=True)
class Mode:
    """One row of the benchmark: how it is started and what it is given."""

    name: str
    kind: str  # "launch" (graph_store / colocated through the launcher) or a _sampling_modes role
    workers: int = 0  # replicated: read tasks per Ray worker (0: inline); pyg: DataLoader workers
    ray_workers: int = 1  # replicated: Ray workers (consumers)
    colocated: bool = False
    machines: int = 2  # colocated: compute machines = partitions (1: the 1-partition shard set)
    knobs: dict = field(default_factory=dict)  # graph-store loader settings (none: defaults)
    processes: str = ""


def modes_for(cores: int, sweep: list[tuple[int, int, int]]) -> list[Mode]:
    """Every mode of a run, in the order they run within a repeat."""
    out = [Mode(f"replicated_w{k}", "replicated", ray_workers=k,
                processes=f"{k} Ray worker(s) (actors), each sampling its share of the seeds "
                          f"inline from the mapped file; embedded Ray num_cpus={cores}")
           for k in (1, 2)]
    out.append(Mode("replicated_w1_read1", "replicated", ray_workers=1, workers=1,
                    processes=f"1 Ray worker (actor) + 1 Ray Data read task sampling the mapped "
                              f"file; embedded Ray num_cpus={cores}, read tasks reserve no CPU"))
    out += [Mode("graph_store", "launch", processes="2 storage processes (each picking its own "
                 "nodes' neighbours and serving their features) + 1 compute process running the "
                 "partitioned sampler; loader defaults"),
            Mode("colocated", "launch", colocated=True,
                 processes="2 compute machines x 1 process, each running the partitioned sampler "
                           "(its own partition in-process, the other over RPC)"),
            Mode("colocated_1", "launch", colocated=True, machines=1,
                 processes="1 compute machine x 1 process running the partitioned sampler over "
                           "the one partition of a 1-partition shard set, in-process"),
            Mode("pyg", "pyg", processes="1 process, sampling inline"),
            Mode(f"pyg_w{cores}", "pyg", workers=cores,
                 processes=f"1 consumer + {cores} persistent DataLoader workers"),
            Mode("dgl", "dgl", processes="1 process (--dgl-python), sampling inline: "
                 "sample_neighbors per hop + to_block + feature gather")]
    for w, c, p in sweep:
        out.append(Mode(f"graph_store_w{w}c{c}p{p}", "launch",
                        knobs={"num_workers": w, "worker_concurrency": c, "prefetch_size": p},
                        processes=f"as graph_store; num_workers={w} worker_concurrency={c} "
                                  f"prefetch_size={p}"))
    return out


def parse_sweep(spec: str) -> list[tuple[int, int, int]]:
    """``"w/c/p,..."`` -> settings; a usage error names the bad item."""
    out = []
    for item in filter(None, spec.split(",")):
        try:
            w, c, p = (int(v) for v in item.split("/"))
        except ValueError:
            usage_error(f"--sweep-graph-store: {item!r} is not num_workers/worker_concurrency/"
                        "prefetch_size, e.g. 1/8/8")
        if min(w, c, p) < 1:
            usage_error(f"--sweep-graph-store: {item!r}: every value must be >= 1")
        out.append((w, c, p))
    return out


# -- preparing the graph ---------------------------------------------------------------------------
def _task(data: Path, command: str) -> dict:
    import yaml

    base = yaml.safe_load((REPO / "configs" / "task_homo.yaml").read_text())
    base["datasetConfig"]["dataRootUri"] = str(data)
    for stage in ("trainerConfig", "inferencerConfig"):
        base[stage]["command"] = command
        base[stage]["graphStoreStorageConfig"]["storageArgs"] = {"sample_edge_direction": "in"}
    return base


def _resources(colocated: bool, machines: int = 2) -> dict:
    local = ({"mode": "colocated", "num_compute_machines": machines,
              "compute_cluster_local_world_size": 1}
             if colocated else
             {"num_storage_processes": 2, "num_compute_machines": 1, "compute_cluster_local_world_size": 1})
    return {k: {"local_graph_store_config": local}
            for k in ("trainer_resource_config", "inferencer_resource_config")}


def write_configs(root: Path, mode: Mode, command: str) -> tuple[Path, Path]:
    import yaml

    tp, rp = root / f"task_{mode.name}.yaml", root / f"resources_{mode.name}.yaml"
    tp.write_text(yaml.safe_dump(_task(root / "data", command)))
    rp.write_text(yaml.safe_dump(_resources(mode.colocated, mode.machines)))
    return tp, rp


def run_dir(root: Path, partitions: int) -> Path:
    """The run directory whose ``shards/`` hold the graph in ``partitions`` partitions (``run/``:
    2, the graph-store and colocated rows, and the graph file; ``run1/``: 1, colocated_1)."""
    return root / ("run" if partitions == 2 else f"run{partitions}")


def prepare(work: Path, num_edges: int) -> Path:
    """``work/e<E>/``: the generated tables, the shard sets (``run/``: 2 partitions; ``run1/``: 1,
    for colocated_1) and the graph file (each made once, reused by later runs)."""
    from graphstore.config import load_config_pair
    from graphstore.tools.datagen import DatasetSpec, generate_dataset
    from graphstore.partition import partition_graph
    from graphstore.modes.replicated.run_files import write_run_graph_files
    from graphstore.formats.run_paths import RunPaths
    from graphstore.formats.shards.reader import is_complete

    root = work / f"e{num_edges}"
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "data" / "dataset.json").exists():
        generate_dataset(DatasetSpec.from_num_edges(num_edges, kind="homo", seed=0),
                         str(root / "data"), overwrite=True)
    tp, rp = write_configs(root, Mode("prepare", "launch"), "python -m components.train")
    task, _ = load_config_pair(str(tp), str(rp))
    run = run_dir(root, 2)
    for parts in (2, 1):
        shards = run_dir(root, parts) / "shards"
        if not is_complete(str(shards)):
            partition_graph(task, num_partitions=parts, output_uri=str(shards))
    if not Path(RunPaths(str(run)).features_file).exists():
        write_run_graph_files(task, str(run))
    return root


# -- running one mode -----------------------------------------------------------------------------
def _consumer_args(a: argparse.Namespace, out: Path) -> list[str]:
    return ["--out", str(out), "--warmup", str(a.warmup), "--epochs", str(a.epochs),
            "--threads", str(a.threads), "--cores", str(a.cores)]


def _argv(a: argparse.Namespace, mode: Mode, root: Path, out: Path, profile: Path | None) -> list[str]:
    from graphstore.formats.run_paths import RunPaths

    run = RunPaths(str(run_dir(root, 2)))
    if mode.kind == "launch":
        cmd = ["python", str(MODES_PY), "graph_store"] + _consumer_args(a, out)
        for flag, key in (("--gs-workers", "num_workers"), ("--gs-concurrency", "worker_concurrency"),
                          ("--gs-prefetch", "prefetch_size")):
            if key in mode.knobs:
                cmd += [flag, str(mode.knobs[key])]
        if profile is not None:
            cmd += ["--profile-dir", str(profile)]
        tp, rp = write_configs(root, mode, " ".join(cmd))
        partitions = mode.machines if mode.colocated else 2  # graph_store: 2 storage processes
        return [sys.executable, "-m", "pipeline", "launch", "--task-config", str(tp),
                "--resource-config", str(rp), "--stage", "train",
                "--run-dir", str(run_dir(root, partitions)),
                "--timeout-s", str(a.timeout_s)]
    python = a.dgl_python if mode.kind == "dgl" else sys.executable
    argv = [python, str(MODES_PY), mode.kind] + _consumer_args(a, out) + \
        ["--workers", str(mode.workers)]
    if mode.kind == "replicated":
        return argv + ["--graph", run.graph_file, "--features", run.features_file,
                       "--ray-workers", str(mode.ray_workers)]
    return argv + ["--shards", run.shards]


def _stop_tree(proc: subprocess.Popen) -> None:
    """End a run we started (its own session): SIGTERM, then SIGKILL after 30 s."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_mode(a: argparse.Namespace, mode: Mode, root: Path, tag: str,
             profile: Path | None = None, during=None) -> dict:
    """Run ``mode`` once on the graph under ``root``; its throughput and memory."""
    out = root / f"{mode.name}.{tag}.json"
    for old in root.glob(f"{out.name}*"):
        old.unlink()
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    log_path = root / f"{mode.name}.{tag}.log"
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(_argv(a, mode, root, out, profile), cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=lambda: os.sched_setaffinity(0, a.cpu_set))
        mem = procs.TreeMemory(proc.pid).start()
        try:
            if during is not None:
                during(proc)
            rc = proc.wait(a.timeout_s)
        except subprocess.TimeoutExpired:
            _stop_tree(proc)
            raise SystemExit(f"{mode.name} ({tag}) still running after --timeout-s {a.timeout_s}: "
                             f"stopped; log {log_path}") from None
        except BaseException:
            _stop_tree(proc)
            raise
        finally:
            peaks = mem.stop()
    if rc != 0:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise SystemExit(f"{mode.name} ({tag}) failed with exit code {rc}; log {log_path}:\n{tail}")
    results = [json.loads(f.read_text()) for f in sorted(root.glob(f"{out.name}*"))
               if not f.name.endswith(".tmp")]
    if not results:
        raise SystemExit(f"{mode.name} ({tag}) exited 0 but wrote no result {out}; log {log_path}")
    procs.label(peaks, {r["pid"] for r in results})
    return summarise_run(mode, results, peaks) | {"wall_s": round(time.perf_counter() - t0, 1)}


def summarise_run(mode: Mode, results: list[dict], peaks: list) -> dict:
    """Seeds/s and edges/s over the timed epochs (several consumers: summed per epoch over the
    slowest), memory per role."""
    timed = [[e for e in r["epochs"] if not e["warmup"]] for r in results]
    seconds = [max(t[i]["seconds"] for t in timed) for i in range(len(timed[0]))]
    seeds = [sum(t[i]["seeds"] for t in timed) for i in range(len(timed[0]))]
    edges = [sum(t[i]["edges"] for t in timed) for i in range(len(timed[0]))]
    compute = [p for p in peaks if p.role in ("consumer", "sampler", "machine")]
    storage = [p for p in peaks if p.role == "storage"]
    roles: dict[str, int] = {}
    cpu: dict[str, float] = {}
    for p in peaks:
        roles[p.role] = roles.get(p.role, 0) + 1
        cpu[p.role] = round(cpu.get(p.role, 0.0) + p.cpu_s, 1)
    mx = lambda ps, key: round(max((getattr(p, key) for p in ps), default=0.0), 1)  # noqa: E731
    return {"mode": mode.name, "seeds_per_s": sum(seeds) / sum(seconds),
            "edges_per_s": sum(edges) / sum(seconds), "seeds_per_epoch": seeds[0],
            "edges_per_seed": round(sum(edges) / max(1, sum(seeds)), 2),
            "epoch_seconds": [round(s, 3) for s in seconds],
            "threads": sorted({r["threads"] for r in results}),
            "settings": results[0]["settings"],
            "compute_peak_rss_mb": mx(compute, "peak_rss_mb"),
            "compute_peak_anon_mb": mx(compute, "peak_anon_mb"),
            "consumer_peak_rss_mb": mx([p for p in peaks if p.role == "consumer"], "peak_rss_mb"),
            "storage_peak_rss_mb": mx(storage, "peak_rss_mb"),
            "storage_peak_anon_mb": mx(storage, "peak_anon_mb"),
            "processes": roles, "cpu_s_by_role": cpu,
            "process_list": [{"pid": p.pid, "role": p.role, "peak_rss_mb": round(p.peak_rss_mb, 1),
                              "peak_anon_mb": round(p.peak_anon_mb, 1), "cpu_s": round(p.cpu_s, 1),
                              "cmdline": p.cmdline[:160]} for p in peaks]}


def _write_json(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    tmp.replace(path)


# -- main ------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    cpus = len(os.sched_getaffinity(0))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edges", type=int, default=1_000_000, help="edges of the 1x graph (nodes: edges/10)")
    ap.add_argument("--scales", default="1,4", help="graph sizes as multiples of --edges, comma-separated")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats of every mode")
    ap.add_argument("--warmup", type=int, default=1, help="untimed epochs before the timed ones")
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs per run")
    ap.add_argument("--cores", type=int, default=cpus,
                    help=f"CPUs every mode is pinned to, and Ray's num_cpus (default: all {cpus} allowed)")
    ap.add_argument("--threads", type=int, default=1,
                    help="OMP/MKL/torch threads of every process (default 1: what the local launcher "
                         "gives every process and PyTorch's DataLoader gives its workers; several "
                         "processes with 2 OpenMP threads each on 2 cores spin against each other)")
    ap.add_argument("--modes", default=None,
                    help="comma-separated subset of the modes to run (default: all; names in the docs above)")
    ap.add_argument("--sweep-graph-store", nargs="?", const=DEFAULT_SWEEP, default="", metavar="W/C/P,...",
                    help="also run graph_store with these loader settings num_workers/worker_concurrency/"
                         f"prefetch_size (default when given without a value: {DEFAULT_SWEEP})")
    ap.add_argument("--profile-graph-store", action="store_true",
                    help="only profile one graph-store epoch with py-spy (storage and compute "
                         "processes; first scale) and print the top frames by category")
    ap.add_argument("--py-spy", default=None, help="py-spy executable (default: py-spy on PATH)")
    ap.add_argument("--profile-rate", type=int, default=100, help="py-spy samples per second")
    ap.add_argument("--dgl-python", default=None, metavar="PATH",
                    help="python of the DGL side environment the dgl row runs with (default "
                         f"{DEFAULT_DGL_PYTHON.relative_to(REPO)} if it exists, else the row is "
                         "skipped; make it with benchmarks/dgl_env.sh)")
    ap.add_argument("--timeout-s", type=int, default=1800, help="a run still going after this fails")
    ap.add_argument("--work", default=str(REPO / ".data" / "bench-sampling"),
                    help="graphs, configs, logs and per-run results (reused across runs)")
    ap.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "sampling.json"),
                    help="where the results JSON goes (written at the end)")
    return ap


def usage_error(message: str) -> None:
    """A user's mistake in the arguments: one line, exit 2."""
    print(f"benchmarks/sampling.py: {message}", file=sys.stderr)
    raise SystemExit(2)


def check_args(a: argparse.Namespace) -> tuple[list[int], list[Mode]]:
    """The graph scales and the modes to run; a usage error (exit 2) for a bad argument. Sets
    ``a.cpu_set``."""
    try:
        scales = [int(s) for s in a.scales.split(",")]
    except ValueError:
        usage_error(f"--scales {a.scales!r}: give comma-separated integers, e.g. 1,4")
    if min(scales + [a.edges, a.repeats, a.epochs, a.cores, a.threads]) < 1 or a.warmup < 0:
        usage_error("--edges, --scales, --repeats, --epochs, --cores and --threads must be >= 1, "
                    "--warmup >= 0")
    allowed = sorted(os.sched_getaffinity(0))
    if a.cores > len(allowed):
        usage_error(f"--cores {a.cores}: this process may use only {len(allowed)} CPUs")
    a.cpu_set = allowed[:a.cores]
    modes = modes_for(a.cores, parse_sweep(a.sweep_graph_store))
    if a.modes:
        wanted = a.modes.split(",")
        unknown = [m for m in wanted if m not in {m.name for m in modes}]
        if unknown:
            usage_error(f"--modes: unknown {unknown}; choose from {[m.name for m in modes]}")
        modes = [m for m in modes if m.name in wanted or m.name.startswith("graph_store_")]
    a.skipped, a.dgl_info = [], None
    if any(m.kind == "dgl" for m in modes) and not a.profile_graph_store:
        reason = check_dgl(a)
        if reason:
            modes = [m for m in modes if m.kind != "dgl"]
            a.skipped.append(f"dgl row skipped: {reason}")
    if a.profile_graph_store and find_py_spy(a.py_spy) is None:
        usage_error(f"--profile-graph-store: py-spy not found ({a.py_spy or 'none on PATH'}): "
                    "install it (pip install py-spy) or give --py-spy PATH")
    return scales, modes


def check_dgl(a: argparse.Namespace) -> str | None:
    """Resolve ``a.dgl_python`` and probe it (``a.dgl_info``: the versions it runs on); why the
    dgl row cannot run, or None. An explicit --dgl-python that is missing or does not work is a
    usage error; the default one missing or not working skips the row."""
    explicit = a.dgl_python is not None
    python = Path(a.dgl_python) if explicit else DEFAULT_DGL_PYTHON
    if not python.exists():
        if explicit:
            usage_error(f"--dgl-python {python}: no such file")
        return f"no DGL environment ({python} absent: make it with benchmarks/dgl_env.sh)"
    a.dgl_python = str(python)
    err = "no output"
    try:
        r = subprocess.run([a.dgl_python, str(MODES_PY), "dgl", "--probe"], cwd=REPO,
                           capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, OMP_NUM_THREADS=str(a.threads),
                                    MKL_NUM_THREADS=str(a.threads)))
        if r.returncode == 0:
            a.dgl_info = json.loads(r.stdout.strip().splitlines()[-1])
        else:
            err = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
        err = repr(e)
    if a.dgl_info is None:
        why = f"{a.dgl_python} cannot import DGL ({err}); remake it with benchmarks/dgl_env.sh"
        if explicit:
            usage_error(f"--dgl-python: {why}")
        return why
    return None


def run_all(a: argparse.Namespace, scales: list[int], modes: list[Mode],
            roots: dict[int, Path]) -> list[dict]:
    """Every mode once per repeat, repeats one after another, per scale (interleaved)."""
    runs = []
    for scale in scales:
        for rep in range(a.repeats):
            for mode in modes:
                r = run_mode(a, mode, roots[scale], f"r{rep}")
                runs.append(r | {"scale": scale, "edges": a.edges * scale, "repeat": rep})
                print(f"# {a.edges * scale:>10,} {mode.name:<24} repeat {rep}: {r['seeds_per_s']:>9,.0f} "
                      f"seeds/s, compute peak {r['compute_peak_rss_mb']:,.0f} MB, run {r['wall_s']} s",
                      flush=True)
    return runs


def _on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(f"stopped by signal {signum}")  # run_mode ends the run it started


def main() -> int:
    a = build_parser().parse_args()
    scales, modes = check_args(a)
    for line in a.skipped:
        print(f"# {line}", flush=True)
    signal.signal(signal.SIGTERM, _on_sigterm)
    t_start = time.perf_counter()
    roots = {}
    for scale in scales:
        t0 = time.perf_counter()
        roots[scale] = prepare(Path(a.work).resolve(), a.edges * scale)
        print(f"# prepared {a.edges * scale:,} edges in {time.perf_counter() - t0:.0f} s: {roots[scale]}",
              flush=True)
    if a.profile_graph_store:
        return profile_graph_store(a, roots[scales[0]], run_mode, Mode("graph_store", "launch"))
    load_before = os.getloadavg()
    runs = run_all(a, scales, modes, roots)
    doc = results_doc(a, scales, {m.name: m.processes for m in modes}, runs, load_before)
    doc["warnings"] = a.skipped + doc["warnings"]
    doc["machine"]["dgl_env"] = a.dgl_info
    doc["total_seconds"] = round(time.perf_counter() - t_start, 1)
    print_table(doc["summary"], doc["ratios"], doc["fairness"], doc["timing"])
    for line in doc["warnings"]:
        print(f"# warning: {line}")
    _write_json(Path(a.json), doc)
    print(f"# wrote {a.json} ({doc['total_seconds']:.0f} s in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
