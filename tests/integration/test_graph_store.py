"""Graph-store runtime end to end: real storage and compute processes on loopback.

2 storage processes x 1 compute machine x 2 compute processes, started by the local launcher, on
a tiny generated graph (heterogeneous and homogeneous). The compute command is
``probe_compute.py``, a seed-000-style user module that records what it fetched and sampled; every
expectation below is computed from the raw input tables, not from the implementation. Every run
that must succeed is also watched for listening sockets: none may be on a non-loopback address.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import psutil
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from graphstore.config import EdgeType, load_config_pair
from graphstore.tools.datagen import DatasetSpec, generate_dataset
from graphstore.partition import partition_graph
from graphstore.formats.shards.reader import ShardSet

from graphstore.dataset.splitter import DistNodeAnchorLinkSplitter
from tests.shard_sets import ranks

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "tests" / "integration" / "probe_compute.py"
GIGL_SCRIPT = REPO / "tests" / "integration" / "gigl_style_compute.py"
pytestmark = [pytest.mark.integration]

RUNTIME = {"readinessTimeoutS": 120, "heartbeatIntervalS": 1, "heartbeatTimeoutS": 8,
           "clusterInitTimeoutS": 120, "rpcTimeoutS": 60, "shutdownTimeoutS": 30}
SPLITTER = {"sampling_direction": "in", "should_convert_labels_to_edges": True,
            "num_val": 0.2, "num_test": 0.2}


def _task(kind: str, data: Path, direction: str, probe_args: str = "",
          script: Path = PROBE) -> dict:
    base = yaml.safe_load((REPO / "configs" / f"task_{kind}.yaml").read_text())
    base["datasetConfig"]["dataRootUri"] = str(data)
    compute = f"python {script} {probe_args}".strip()
    splitter = dict(SPLITTER, sampling_direction=direction)
    base["trainerConfig"]["command"] = compute
    base["trainerConfig"]["graphStoreStorageConfig"]["storageArgs"] = {
        "sample_edge_direction": direction,
        "splitter_cls_path": "graphstore.DistNodeAnchorLinkSplitter", "splitter_kwargs": splitter}
    base["inferencerConfig"]["command"] = compute
    base["inferencerConfig"]["graphStoreStorageConfig"]["storageArgs"] = {
        "sample_edge_direction": direction,
        "splitter_cls_path": "graphstore.DistNodeAnchorLinkSplitter", "splitter_kwargs": splitter}
    base["graphStoreRuntimeConfig"] = RUNTIME
    return base


def _resources(colocated: bool = False) -> dict:
    """2 storage x 1 compute machine x 2 processes; colocated: 2 compute machines x 1, no storage."""
    local = ({"num_storage_processes": 0, "num_compute_machines": 2, "compute_cluster_local_world_size": 1}
             if colocated else
             {"num_storage_processes": 2, "num_compute_machines": 1, "compute_cluster_local_world_size": 2})
    return {k: {"local_graph_store_config": local}
            for k in ("trainer_resource_config", "inferencer_resource_config")}


def _prepare(tmp: Path, kind: str, direction: str, probe_args: str = "",
             colocated: bool = False, script: Path = PROBE) -> tuple[Path, Path, Path]:
    data = tmp / "data"
    if not data.exists():
        generate_dataset(DatasetSpec.from_preset("tiny", kind="hetero" if kind == "hetero" else "homo",
                                                 seed=3), str(data))
    tp, rp, run = tmp / "task.yaml", tmp / "resources.yaml", tmp / "run"
    tp.write_text(yaml.safe_dump(_task(kind, data, direction, probe_args, script)))
    rp.write_text(yaml.safe_dump(_resources(colocated)))
    task, _ = load_config_pair(str(tp), str(rp))
    partition_graph(task, num_partitions=2, output_uri=str(run / "shards"))
    return tp, rp, run


def _public_interface() -> str | None:
    """An interface with a non-loopback IPv4 address, if this machine has one."""
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and not ipaddress.ip_address(a.address).is_loopback
               for a in addresses):
            return name
    return None


def _launch(tp: Path, rp: Path, run: Path, stage: str = "train",
            timeout_s: int = 240) -> tuple[subprocess.Popen, Path]:
    """Start the launcher; its output goes to a file (a pipe nobody reads could block it).

    The launcher's own environment points gloo and TensorPipe at a public interface (as on a
    machine whose host name resolves to a public address): local processes must listen on
    loopback regardless (see :func:`_run_ok`)."""
    out = run.parent / f"launch-{stage}.out"
    public = _public_interface()
    env = {**os.environ, **({"GLOO_SOCKET_IFNAME": public, "TP_SOCKET_IFNAME": public}
                            if public else {})}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "launch", "--task-config", str(tp), "--resource-config",
         str(rp), "--stage", stage, "--run-dir", str(run), "--timeout-s", str(timeout_s),
         "--failure-grace-s", "60"],
        cwd=REPO, env=env, stdout=out.open("w"), stderr=subprocess.STDOUT, text=True)
    return proc, out


class ListenerWatch(threading.Thread):
    """Every TCP socket in LISTEN state of a launcher's process tree, sampled every
    ``interval_s`` while it runs (psutil reads /proc/<pid>/fd and /proc/net/tcp{,6}): ``seen``
    maps (pid, address, port) to the command line of the machine process (a child of the
    launcher) whose tree holds it."""

    def __init__(self, root_pid: int, interval_s: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.root, self.interval_s = root_pid, interval_s
        self.seen: dict[tuple[int, str, int], str] = {}
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                launcher = psutil.Process(self.root)
                machines = [(launcher, [])] + [(m, m.children(recursive=True))
                                               for m in launcher.children()]
                labels = {m.pid: " ".join(m.cmdline())[:160] for m, _ in machines}
            except (psutil.NoSuchProcess, psutil.ZombieProcess):  # a child just ended
                machines, labels = [], {}
            for machine, tree in machines:
                for p in [machine, *tree]:
                    try:
                        for c in p.net_connections("tcp"):
                            if c.status == psutil.CONN_LISTEN:
                                self.seen.setdefault((p.pid, c.laddr.ip, c.laddr.port),
                                                     labels[machine.pid])
                    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                        continue
            self.stopped.wait(self.interval_s)


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def _run_ok(tp: Path, rp: Path, run: Path, stage: str = "train", script: Path = PROBE) -> str:
    """Run a stage to success; meanwhile no process of the run may listen on a non-loopback
    address (docs/architecture.md, Publishing and data safety: rendezvous stores and RPC listen on
    loopback in local mode)."""
    proc, out = _launch(tp, rp, run, stage)
    watch = ListenerWatch(proc.pid)
    watch.start()
    try:
        proc.wait(timeout=300)
    finally:
        watch.stopped.set()
        watch.join(timeout=30)
    text = out.read_text()
    assert proc.returncode == 0, text[-6000:]
    assert not watch.is_alive()
    exposed = sorted(f"{ip}:{port} ({cmd})" for (_, ip, port), cmd in watch.seen.items()
                     if not _loopback(ip))
    assert not exposed, "listening beyond loopback: " + "; ".join(exposed)
    commands = " ".join(watch.seen.values())  # the watch did see the run's own listeners
    assert "components.storage" in commands or "[storage" not in text, sorted(watch.seen.items())
    assert script.name in commands, sorted(watch.seen.items())
    return text


def _records(run: Path, session: int = 0) -> list[dict]:
    files = sorted((run / "probe").glob(f"session{session}_rank*.pt"))
    assert len(files) == 2, files
    return [torch.load(f) for f in files]


def _raw_graph(run: Path) -> tuple[ShardSet, dict[str, set]]:
    """Every edge of the raw graph, in dense ids, per edge type key (reverse types included)."""
    shards = ShardSet.open(str(run / "shards"))
    edges = {}
    for key in shards.manifest.edge_types:
        pairs = set()
        for p in range(shards.manifest.num_partitions):
            e = shards.load_partition(p).edges[key]
            pairs.update(zip(e.src.tolist(), e.dst.tolist()))
        edges[key] = pairs
    return shards, edges


def _raw_features(data: Path, shards: ShardSet, node_type: str, file: str, id_col: str) -> dict:
    table = pq.read_table(data / file)
    raw_ids = table.column(id_col).to_pylist()
    feats = np.stack([table.column(f"f_{i}").to_numpy() for i in range(16)], 1)
    dense = {r: i for i, r in enumerate(shards.id_map(node_type).column("raw_id").to_pylist())}
    return {dense[r]: feats[j] for j, r in enumerate(raw_ids)}


def _check_run(run: Path, data: Path, kind: str, direction: str) -> None:
    recs = _records(run)
    shards, raw = _raw_graph(run)
    sup_type = recs[0]["meta"].supervision_edge_types[0]
    sup, src_t = str(sup_type), sup_type.src_node_type
    labels = Counter()
    for p in range(2):
        lab = shards.load_partition(p).labels[sup]
        labels.update(zip(lab.src.tolist(), lab.dst.tolist()))
    all_anchors = {a for a, _ in labels}
    # splits: disjoint, cover every anchor, and agree with the splitter's pure function
    by_split = {s: set() for s in ("train", "val", "test")}
    for r in recs:
        for s in by_split:
            for t in r[f"anchors_{s}"].values():
                got = t.tolist()
                assert not by_split[s] & set(got), "an anchor was given to two compute ranks"
                by_split[s] |= set(got)
    assert not (by_split["train"] & by_split["val"]) and not (by_split["train"] & by_split["test"])
    assert not (by_split["val"] & by_split["test"])
    assert by_split["train"] | by_split["val"] | by_split["test"] == all_anchors
    splitter = DistNodeAnchorLinkSplitter(**dict(SPLITTER, sampling_direction=direction))
    codes = splitter.assign(src_t, ranks(shards, src_t)[np.array(sorted(all_anchors))],
                            shards.manifest.node_types[src_t].count)  # ranks: independent of P
    assert {a for a, c in zip(sorted(all_anchors), codes) if c == 2} == by_split["test"]
    assert 0.05 < len(by_split["test"]) / len(all_anchors) < 0.4
    # every training (anchor, positive) pair is seen exactly once in the epoch, across ranks
    train_pairs = Counter({pair: n for pair, n in labels.items() if pair[0] in by_split["train"]})
    seen = Counter(tuple(p) for r in recs for p in r["ablp_pairs"])
    assert seen == train_pairs
    # every sampled edge exists in the graph storage serves, and val/test supervision is held out
    # (batches follow PyG's message-flow convention: with sample_edge_direction "out" a sampled
    # edge u->v of type T is listed flipped, under GLT's reverse of T)
    heldout = by_split["val"] | by_split["test"]
    rev = next((k for k, e in shards.manifest.edge_types.items() if e.reverse_of == sup), None)
    assert (rev is None) == (kind == "homo")  # hetero: the partitioner added item -rev_buys-> user
    checked = Counter()
    anchor_seeds = Counter(a for r in recs for a in r["anchor_seeds"])  # held-out ones included
    assert anchor_seeds == Counter(range(shards.manifest.node_types[src_t].count))
    for r in recs:
        # each edge once per batch: GLT's link sampling merges the anchors' and the labels'
        # neighbourhoods and repeats the edges both reached (glt_adapter.distinct_edges)
        assert r["ablp_repeated_edges"] == 0, r["ablp_repeated_edges"]
        # one walk from all the seeds (glt_adapter.one_pass_link_sampling): a node is expanded
        # once, so no node has more edges of a type (listed in message-flow order, to the
        # expanded node) than the largest fan-out, 4; GLT's two walks gave a label node beside
        # its anchor up to 4 + 3
        assert max(r["ablp_most_per_dst"].values(), default=0) <= 4, r["ablp_most_per_dst"]
        for sampled in (r["ablp_edges"], r["nbr_edges"], r["anchor_edges"]):
            for key, pairs in sampled.items():
                key = next(iter(raw)) if key == "__homo__" else key
                pairs = [tuple(p) for p in pairs]
                if direction == "out":
                    key = str(EdgeType.parse(key).reverse())
                    pairs = [(b, a) for a, b in pairs]
                missing = [p for p in pairs if p not in raw[key]]
                assert not missing, f"{key}: sampled edges not in the graph, e.g. {missing[:3]}"
                # a held-out anchor's supervision edges are in neither direction: not as the
                # source of the supervision type, not as the destination of its reverse type
                if key in (sup, rev):
                    anchor = 0 if key == sup else 1
                    leaked = [p for p in pairs if p[anchor] in heldout]
                    assert not leaked, f"{key}: held-out anchors' supervision sampled: {leaked[:3]}"
                    checked[key] += len(pairs)
    assert checked[sup] > 50 and (rev is None or checked[rev] > 50), checked
    # features equal the raw features of the sampled node ids
    files = ({"user": ("users.parquet", "user_id"), "item": ("items.parquet", "item_id")}
             if kind == "hetero" else {"item": ("nodes.parquet", "node_id")})
    truth = {nt: _raw_features(data, shards, nt, *files[nt]) for nt in files}
    checked = 0
    for r in recs:
        for batch in r["ablp_feats"]:
            for nt, (ids, x) in batch.items():
                nt = "item" if nt == "__homo__" else nt
                for i, row in zip(ids.tolist(), x):
                    np.testing.assert_allclose(row.numpy(), truth[nt][i], rtol=1e-6)
                    checked += 1
    assert checked > 100
    # the neighbour loader's seeds: every node of the type exactly once across ranks
    nt = recs[0]["node_type"]
    seeds = Counter(s for r in recs for s in r["seeds"])
    assert seeds == Counter(range(shards.manifest.node_types[nt].count))


@pytest.fixture(scope="module")
def hetero_in_run(tmp_path_factory) -> Path:
    """One graph-store train run of the heterogeneous graph, ``in`` direction, read by the tests
    below that only check what it recorded (one launch of ~50 s, not two)."""
    tmp = tmp_path_factory.mktemp("hetero-in")
    tp, rp, run = _prepare(tmp, "hetero", "in")
    (run / "launch_output.txt").write_text(_run_ok(tp, rp, run))
    return run


@pytest.mark.timeout(420)
@pytest.mark.parametrize("kind,direction", [("hetero", "in"), ("hetero", "out"), ("homo", "in")])
def test_graph_store_sampling_matches_raw_graph(tmp_path, request, kind, direction):
    if (kind, direction) == ("hetero", "in"):
        run = request.getfixturevalue("hetero_in_run")
        out = (run / "launch_output.txt").read_text()
    else:
        tp, rp, run = _prepare(tmp_path, kind, direction)
        out = _run_ok(tp, rp, run)
    _check_run(run, run.parent / "data", kind, direction)


@pytest.mark.timeout(420)
def test_colocated_mode_gives_the_same_splits_and_seed_coverage(tmp_path, hetero_in_run):
    graph_store = _records(hetero_in_run)
    tp2, rp2, run2 = _prepare(tmp_path / "colocated", "hetero", "in", colocated=True)
    out = _run_ok(tp2, rp2, run2)
    assert "[storage" not in out  # no storage processes at all
    _check_run(run2, tmp_path / "colocated" / "data", "hetero", "in")
    colocated = _records(run2)
    for split in ("train", "val", "test"):
        def anchors(recs):
            return sorted(a for r in recs for t in r[f"anchors_{split}"].values() for a in t.tolist())
        assert anchors(colocated) == anchors(graph_store)


@pytest.mark.timeout(420)
def test_two_sessions_on_one_storage_run(tmp_path):
    tp, rp, run = _prepare(tmp_path, "hetero", "in", probe_args="--sessions 2")
    # the inferencer embeds 2 node types: its storage derives 2 sessions
    out = _run_ok(tp, rp, run, stage="infer")
    for session in (0, 1):
        recs = _records(run, session)
        assert {r["session"] for r in recs} == {session}
        assert sum(len(r["seeds"]) for r in recs) > 0
    assert out.count("session=1 done") == 2, out[-3000:]


@pytest.mark.timeout(420)
# "homo" passes as well (one more launch, ~100 s here): CI runs the heterogeneous graph only
@pytest.mark.parametrize("kind", ["hetero"])
def test_a_gigl_style_script_gets_gigls_answers_through_the_launcher(tmp_path, kind):
    """tests/integration/gigl_style_compute.py, written from GiGL's public docs, runs unchanged;
    every answer is checked against the shards it was served from. (Homogeneous answers are
    checked in-process in tests/unit/test_dataset_contract.py, through the same code.)"""
    from graphstore import FeatureInfo

    tp, rp, run = _prepare(tmp_path, kind, "in", script=GIGL_SCRIPT)
    _run_ok(tp, rp, run, script=GIGL_SCRIPT)
    recs = [torch.load(f) for f in sorted((run / "gigl").glob("rank*.pt"))]
    assert [(r["rank"], r["world_size"]) for r in recs] == [(0, 2), (1, 2)]
    shards = ShardSet.open(str(run / "shards"))
    m = shards.manifest
    keys = list(m.edge_types)
    homo = kind == "homo"
    anchor_t = next(iter(m.node_types)) if homo else "user"
    features = FeatureInfo(16, torch.float32)
    for r in recs:
        assert r["node_types"] == (None if homo else list(m.node_types))
        assert r["edge_types"] == (None if homo else [tuple(k.split("__")) for k in keys])
        assert r["edge_dir"] == "in" and r["edge_feature_info"] is None
        assert r["node_feature_info"] == (features if homo else {"user": features, "item": features})
        books = {anchor_t: r["node_partition_book"]} if homo else r["node_partition_book"]
        assert set(books) == set(m.node_types)
        for nt, book in books.items():  # one range per partition, partition 0's first
            assert book[torch.arange(m.node_types[nt].count)].tolist() == _owners(m, nt).tolist()
        ebooks = ({keys[0]: r["edge_partition_book"]} if homo else
                  {"__".join(et): b for et, b in r["edge_partition_book"].items()})
        assert set(ebooks) == set(keys)
        for key, book in ebooks.items():
            for p in range(2):
                eids = shards.load_partition(p).edges[key].eids
                assert (book[torch.from_numpy(eids)] == p).all()
    ports = recs[0]["free_ports"]  # rank 0 asked; every rank got the same
    assert len(set(ports)) == 3 and all(0 < p < 65536 for p in ports)
    assert recs[1]["free_ports"] == ports
    # node ids: each storage rank answers with ids it owns; the ranks together get each once
    book = _owners(m, anchor_t)
    got = {s: Counter() for s in (None, "train", "val", "test")}
    for r in recs:
        for split, per_storage in r["node_ids"].items():
            assert set(per_storage) == {0, 1}
            for k, ids in per_storage.items():
                assert (book[ids.numpy()] == k).all()
                got[split].update(ids.tolist())
    assert got[None] == Counter(range(m.node_types[anchor_t].count))
    sup = keys[0] if homo else "user__buys__item"
    anchors = np.unique(np.concatenate([shards.load_partition(p).labels[sup].src for p in range(2)]))
    codes = DistNodeAnchorLinkSplitter(**SPLITTER).assign(  # of ranks: independent of P
        anchor_t, ranks(shards, anchor_t)[anchors], m.node_types[anchor_t].count)
    for split, code in (("train", 0), ("val", 1), ("test", 2)):
        assert got[split] == Counter(anchors[codes == code].tolist()), split
    for r in recs:  # the ABLP anchors are the train node ids, their labels keyed by the edge type
        assert {k: v.tolist() for k, v in r["ablp_anchors"].items()} == {
            k: v.tolist() for k, v in r["node_ids"]["train"].items()}
        assert all(set(labels) == {tuple(sup.split("__"))}
                   for labels in r["ablp_positive_labels"].values())


def _owners(manifest, node_type: str) -> np.ndarray:
    """The partition of each dense id of ``node_type``: the manifest's counts per partition, as
    consecutive ranges (shard format, schema 3)."""
    counts = manifest.node_types[node_type].counts_per_partition
    return np.repeat(np.arange(len(counts)), counts)


def _descendants_gone(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


@pytest.mark.timeout(300)
def test_killed_storage_fails_every_compute_fast_and_leaves_no_process(tmp_path):
    tp, rp, run = _prepare(tmp_path, "hetero", "in", probe_args="--slow-s 0.5")
    proc, out_path = _launch(tp, rp, run)
    launcher = psutil.Process(proc.pid)
    victim = None
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        if len(list((run / "probe").glob("sampling_rank*"))) == 2:  # both ranks mid-epoch
            # storage 1 is global rank 2 (compute machines first: docs/runtime.md)
            victim = next(c for c in launcher.children() if c.environ().get("RANK") == "2")
            assert "components.storage" in " ".join(victim.cmdline())
            break
        time.sleep(0.3)
    assert victim is not None, "compute never started sampling"
    tree = [p.pid for p in launcher.children(recursive=True)]
    for p in [victim, *victim.children(recursive=True)]:
        p.kill()
    killed_at = time.monotonic()
    proc.wait(timeout=200)
    elapsed = time.monotonic() - killed_at
    out = out_path.read_text()
    assert proc.returncode == 1, out[-4000:]
    assert elapsed < 60, f"the run took {elapsed:.0f}s to end after the kill"
    compute_errors = [ln for ln in out.splitlines() if ln.startswith("[compute") and "storage rank 1" in ln]
    assert compute_errors, out[-4000:]
    assert "launch: storage 1 (rank 2) failed first" in out, out[-3000:]
    assert not _descendants_gone(tree)
