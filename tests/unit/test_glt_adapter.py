"""graphstore.dataset.glt_adapter: the GLT version check (both branches, with real installed-package
metadata), the storage fetch on a real GLT channel, a failed sampling batch, and the stall reports."""

from __future__ import annotations

from typing import Any

import pytest

from graphstore.tools.doctor import failed_requirements
from graphstore.dataset.glt_adapter import GLT_VERSION, check_glt_version, glt_version_problem

def test_the_pinned_version_passes_and_others_are_named():
    assert glt_version_problem(GLT_VERSION) is None
    assert glt_version_problem(f"{GLT_VERSION}+cu121") is None
    check_glt_version()  # the stack installed here is the pinned one
    other = glt_version_problem("0.2.5")
    assert other == ("graphlearn-torch 0.2.5 is installed, but graphstore's GLT workarounds "
                     "(graphstore/dataset/glt_adapter.py) were written for 0.2.4: install "
                     "graphlearn-torch==0.2.4 (docs/stack.md; `make setup`)")
    assert glt_version_problem(None).startswith("graphlearn-torch is not installed, but ")
    assert glt_version_problem("0.2.40") and glt_version_problem("0.2") and glt_version_problem("")


# every workaround, under another installed GLT version: one line, exit 1, nothing patched
def test_doctor_require_glt_fails_on_another_version():
    report = {"packages": {"graphlearn_torch": {"importable": True, "version": "0.3.0"}},
              "neighbor_sampling": {"graphlearn_torch": {"ok": True}},
              "torch": {"cuda_available": False},
              "glt_adapter": {"ok": False, "error": glt_version_problem("0.3.0")}}
    assert failed_requirements(report, neighbor=False, glt=True, cuda=False) == [
        glt_version_problem("0.3.0")]
    assert failed_requirements(report, neighbor=False, glt=False, cuda=False) == []
    report["glt_adapter"] = {"ok": True}
    assert failed_requirements(report, neighbor=False, glt=True, cuda=False) == []


# each workaround applied twice, in one process with real GLT, torch RPC and a gloo group
def test_other_names_are_not_built():
    import graphstore.dataset.glt_adapter as adapter

    with pytest.raises(AttributeError, match="no attribute 'DistLoader'"):
        adapter.DistLoader  # noqa: B018


def test_glt_samples_with_replacement_above_the_fanout():
    """GLT 0.2.4's CPU sampler draws a node's neighbours with replacement when its degree exceeds
    the fan-out; it has no option for it (docs/runtime.md, GLT pitfalls): fan-out 10
    of 20 in-neighbours gives 10 edges but usually fewer distinct neighbours. This pins the
    behaviour graph-store mode inherits; it fails once GLT samples without replacement (then
    update the docs' pitfall row and the benchmark's edges-per-seed note)."""
    import torch
    from graphlearn_torch.data import Dataset
    from graphlearn_torch.sampler import NeighborSampler, NodeSamplerInput

    neighbours = torch.arange(1, 21)
    dataset = Dataset()  # CSR rows are edge_index[0]: node 0's row holds its 20 neighbours
    dataset.init_graph(edge_index=torch.stack([torch.zeros(20, dtype=torch.long), neighbours]),
                       graph_mode="CPU")
    sampler = NeighborSampler(dataset.graph, [10], device=torch.device("cpu"), with_edge=True)
    distinct, edges = [], []
    for _ in range(200):
        out = sampler.sample_from_nodes(NodeSamplerInput(node=torch.tensor([0])))
        edges.append(int(out.row.numel()))
        distinct.append(int(out.node.numel()) - 1)  # the seed is node 0
    assert set(edges) == {10}
    # without replacement every draw would have 10 distinct neighbours; with replacement the
    # expected count is 20 * (1 - (19/20)**10) = 8.0
    assert sum(distinct) / len(distinct) < 9.0, distinct


def test_a_lazily_built_class_is_built_once_when_threads_ask_at_once(monkeypatch):
    """A storage session unpickles inputs on several RPC threads at once: every thread must get
    the very class the module names (two built classes: one failed to pickle, seen in a test
    run). A slow builder makes the threads meet."""
    import threading
    import time

    from graphstore.dataset import glt_adapter

    def slow_build() -> type:
        time.sleep(0.2)
        return glt_adapter._as_module_level(type("LabeledEdgeInput", (), {}))

    monkeypatch.setitem(glt_adapter._BUILDERS, "LabeledEdgeInput", slow_build)
    monkeypatch.setattr(glt_adapter, "_built", {})
    got = []
    threads = [threading.Thread(target=lambda: got.append(glt_adapter.LabeledEdgeInput))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and len({id(c) for c in got}) == 1


def test_a_failed_rpc_is_one_line_naming_the_server_and_marks_it_failed(monkeypatch):
    from graphstore.dataset import glt_adapter
    monkeypatch.setattr(glt_adapter, "_failed_servers", set())
    # what torch RPC raises on the client when the server's function raised (its message: the
    # server's WorkerInfo, repr(exception), the server's traceback)
    remote = RuntimeError("RuntimeFailure: On WorkerInfo(id=1, name=gs_server_1):\nRuntimeFailure("
                          "\"sampling producer 3: sampling worker 0 (pid 77) exited with code -9\")\n"
                          "Traceback (most recent call last):\n  File \"x.py\", line 1")
    err = glt_adapter._storage_rpc_failure("fetching a sampled batch from", 1, 3, remote, "fetch")
    assert str(err).startswith(
        "graph-store loader: fetching a sampled batch from storage rank 1 (producer 3) failed: "
        "RuntimeFailure: sampling producer 3: sampling worker 0 (pid 77) exited with code -9 (")
    assert glt_adapter._failed_servers == {1}
    timeout = RuntimeError("RPCErr:1:RPC ran for more than set timeout (15000 ms)\nmore")
    err = glt_adapter._storage_rpc_failure("starting epoch 2 on", 0, 5, timeout, "request")
    assert ("starting epoch 2 on storage rank 0 (producer 5) failed: RuntimeError: RPCErr:1:RPC "
            "ran for more than set timeout (15000 ms) (rpcTimeoutS") in str(err)
    assert glt_adapter._failed_servers == {0, 1}


class _Worker:
    def __init__(self, pid: int) -> None:
        self.pid, self.exitcode = pid, None


class _Producer:
    """What the fetch watch reads of GLT's ``DistMpSamplingProducer``."""

    class _Count:
        value = 1

    class _Channel:
        def empty(self) -> bool:
            return True

    def __init__(self) -> None:
        self._workers = [_Worker(101), _Worker(102)]
        self.sampling_completed_worker_count = self._Count()
        self.num_workers = 2
        self.output_channel = self._Channel()


def test_a_fetch_stuck_anywhere_is_reported_once_with_the_stacks(monkeypatch, caplog, capfd):
    import threading
    import time

    from graphstore.dataset import glt_adapter

    monkeypatch.setattr(glt_adapter, "FETCH_REPORT_S", 0.3)
    monkeypatch.setattr(glt_adapter, "FETCH_CHECK_S", 0.1)
    watch = glt_adapter._FetchWatch()
    producer, release = _Producer(), threading.Event()

    def stuck_fetch() -> None:  # stands for a fetch blocked inside GLT's channel
        with watch.watching(7, producer):
            release.wait(10)

    fetches = [threading.Thread(target=stuck_fetch) for _ in range(2)]
    with caplog.at_level("WARNING", logger="graphstore.dataset.glt_adapter"):
        for t in fetches:
            t.start()
        with watch.watching(8, producer):  # a quick fetch of another producer: never reported
            pass
        deadline = time.monotonic() + 10
        while sum("has run" in r.getMessage() for r in caplog.records) < 1 \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # more watch rounds: still one report
        release.set()
        for t in fetches:
            t.join(10)
    reports = [r.getMessage() for r in caplog.records if "has run" in r.getMessage()]
    assert len(reports) == 1, reports
    assert reports[0].startswith("sampling producer 7: a batch fetch has run ")
    assert "1 of 2 sampling workers (pids 101, 102, 2 alive) finished the epoch" in reports[0]
    assert "in stuck_fetch" in capfd.readouterr().err  # this session's stacks, the stuck thread's too
    assert watch._running == {}


def test_a_loader_waiting_long_for_a_batch_names_its_unanswered_fetches(monkeypatch, caplog, capfd):
    import threading
    import time

    from graphstore.dataset import glt_adapter

    monkeypatch.setattr(glt_adapter, "FETCH_REPORT_S", 0.3)
    channel = glt_adapter.FailFastReceivingChannel(server_rank=[0, 1], producer_id=[3, 4],
                                                   prefetch_size=2)
    now = time.monotonic()
    channel._sent_at()[1] = glt_adapter.collections.deque([now - 40, now - 1])
    late = threading.Timer(1.0, lambda: channel.queue.put(("batch", False, 1)))
    with caplog.at_level("WARNING", logger="graphstore.dataset.glt_adapter"):
        late.start()
        assert channel._get() == ("batch", False, 1)  # the report does not lose the delivery
    reports = [r.getMessage() for r in caplog.records]
    assert len(reports) == 1, reports
    assert reports[0].startswith("graph-store loader: no batch for 0 s; fetches unanswered: "
                                 "storage rank 1 (producer 4): 2, oldest 4")  # ~40 s
    assert "in _get" in capfd.readouterr().err


class _Server:
    """What a batch fetch reads of GLT's ``DistServer``: one producer (id 0) and its channel."""

    def __init__(self, producer: Any, channel: Any) -> None:
        self._producer_pool, self._msg_buffer_pool = {0: producer}, {0: channel}


def test_fetches_polling_one_channel_never_claim_a_message_that_was_not_sent(monkeypatch):
    """Eight fetches wait on one producer's real GLT channel (the client keeps several in flight
    per server) while messages arrive one at a time. After each message is fetched the channel
    must read empty: GLT 0.2.4's queue lets a second reader claim the next, unwritten block (its
    "empty" then reads False), and that reader waits for a message that, after an epoch's last
    one, never comes: the fetch hung until the client's rpcTimeoutS. With GLT's plain receive in
    place of the fetch's lock (every fetch its own lock), this test failed 4 of 5 runs at 4 000
    messages here (2-3 such claims each).
    At the end of the epoch every fetch answers "end of epoch"."""
    import threading
    import time

    import torch
    from graphlearn_torch.channel import ShmChannel

    from graphstore.dataset import glt_adapter

    monkeypatch.setattr(glt_adapter, "RECEIVE_WAIT_S", 0.005)
    producer, channel = _Producer(), ShmChannel(64, 1 << 20)
    producer.sampling_completed_worker_count = type("Count", (), {"value": 0})()
    producer.num_workers, producer._shutdown = 1, False
    producer.is_all_sampling_completed = lambda: producer.sampling_completed_worker_count.value == 1
    server, fetched, ends, errors = _Server(producer, channel), threading.Semaphore(0), [], []

    def fetch_until_the_epoch_ends() -> None:
        try:
            while True:
                msg, end = glt_adapter._fetch_one_sampled_message(server, 0)
                if end:
                    ends.append(msg)
                    return
                del msg  # as the server does once the reply is sent: the channel frees its block
                fetched.release()
        except BaseException as exc:  # noqa: BLE001 (asserted below)
            errors.append(exc)

    fetches = [threading.Thread(target=fetch_until_the_epoch_ends, daemon=True) for _ in range(8)]
    for t in fetches:
        t.start()
    claimed_unsent = 0
    message = {"x": torch.zeros(1)}
    for _ in range(6000):
        channel.send(message)
        assert fetched.acquire(timeout=10), "a sent message was not fetched"
        if not channel.empty():
            claimed_unsent += 1
            channel.send(message)  # the block a fetch claimed: it returns
            assert fetched.acquire(timeout=10)
    producer.sampling_completed_worker_count.value = 1  # the worker finished the epoch
    deadline = time.monotonic() + 10
    for t in fetches:
        t.join(max(0.0, deadline - time.monotonic()))
    assert claimed_unsent == 0
    assert not errors and ends == [None] * 8 and not any(t.is_alive() for t in fetches)


def test_a_sampling_batch_that_raises_ends_its_worker_with_the_traceback(monkeypatch, caplog):
    """GLT only logs "coroutine task failed" and loses the batch; a graph-store sampling worker
    (which imports graphstore.dataset.sampling_worker) logs the traceback and exits instead."""
    from graphlearn_torch.distributed.event_loop import ConcurrentEventLoop

    from graphstore.dataset import glt_adapter

    monkeypatch.setattr(ConcurrentEventLoop, "add_task", ConcurrentEventLoop.add_task)  # restored after
    exits: list[int] = []
    glt_adapter.exit_on_failed_batch(exit_process=exits.append)
    loop, delivered = ConcurrentEventLoop(2), []

    async def batch(fail: bool) -> str:
        if fail:
            raise ValueError("no feature row for node 7")
        return "batch"

    loop.start_loop()
    with caplog.at_level("ERROR", logger="graphstore.dataset.glt_adapter"):
        loop.add_task(batch(False), callback=delivered.append)
        loop.wait_all()
        assert delivered == ["batch"] and exits == []
        loop.add_task(batch(True), callback=delivered.append)
        loop.wait_all()
    loop.shutdown_loop()
    assert exits == [glt_adapter.EXIT_FAILED_BATCH] and delivered == ["batch"]
    (record,) = caplog.records
    assert "a batch failed; ending this worker" in record.getMessage()
    assert "ValueError: no feature row for node 7" in caplog.text  # the traceback, not one line


def test_graphs_built_without_the_column_count_sample_the_same_edges():
    """skip_column_count: the C++ graph gets only the first column (GLT's count of distinct
    columns would sort every edge), yet it samples every row's neighbours and edge ids as GLT's
    full build does, and col_count / edge_count still answer the topology's values."""
    import torch
    from graphlearn_torch import py_graphlearn_torch as pywrap
    from graphlearn_torch.data import Graph, Topology

    from graphstore.dataset import glt_adapter

    gen = torch.Generator().manual_seed(7)
    rows, edges = 60, 500
    degree = torch.bincount(torch.randint(0, rows - 5, (edges,), generator=gen), minlength=rows)
    indptr = torch.cat([torch.zeros(1, dtype=torch.long), degree.cumsum(0)])
    indices = torch.randint(0, 1000, (edges,), generator=gen)
    eids = torch.randperm(edges, generator=gen) + 10_000
    for t in (indptr, indices, eids):  # as storage hands them over: GLT's Graph shares them,
        t.share_memory_()  # which moves a tensor that is not shared yet (the C++ graph keeps pointers)
    full = pywrap.Graph()  # GLT's own build: every column, counted
    full.init_cpu_from_csr(indptr, indices, eids, torch.empty(0))

    glt_adapter.skip_column_count()
    glt_adapter.skip_column_count()  # idempotent
    graph = Graph(Topology((indptr, indices), eids, input_layout="CSR", layout="CSR"), mode="CPU")
    graph.lazy_init()
    assert graph._graph.get_edge_count() == 1  # the C++ graph holds the first column only
    assert (graph.row_count, graph.col_count, graph.edge_count) == (
        full.get_row_count(), full.get_col_count(), edges)

    nodes = torch.arange(rows + 3)  # the last rows have no edges; 3 ids lie past the row count
    ours = pywrap.CPURandomSampler(graph._graph).sample_with_edge(nodes, -1)
    glts = pywrap.CPURandomSampler(full).sample_with_edge(nodes, -1)
    for a, b in zip(ours, glts):
        assert torch.equal(a, b)
    nbrs, counts, sampled_eids = pywrap.CPURandomSampler(graph._graph).sample_with_edge(nodes, 3)
    owner = torch.repeat_interleave(nodes, counts)
    true_pairs = {(int(r), int(c), int(e)) for r, c, e in zip(
        torch.repeat_interleave(torch.arange(rows), degree), indices, eids)}
    assert counts.sum() > 0
    assert {(int(r), int(c), int(e)) for r, c, e in zip(owner, nbrs, sampled_eids)} <= true_pairs


def test_distinct_edges_keeps_each_edge_once_with_its_attributes():
    """glt_adapter.distinct_edges: the first occurrence of every (src, dst) pair of each edge
    type stays, in order, with its edge id, weight and feature row; a type without repeats is
    untouched; a homogeneous batch loses its repeats too, not its nodes."""
    import torch
    from torch_geometric.data import Data, HeteroData

    from graphstore.dataset.glt_adapter import distinct_edges

    batch = HeteroData()
    buys = batch["user", "buys", "item"]
    buys.edge_index = torch.tensor([[0, 1, 0, 2, 1, 0], [3, 0, 3, 1, 0, 2]])
    buys.edge = torch.tensor([10, 11, 10, 12, 11, 13])
    buys.edge_attr = torch.arange(12, dtype=torch.float32).view(6, 2)
    buys.edge_weight = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    similar = batch["item", "similar_to", "item"]
    similar.edge_index = torch.tensor([[0, 1], [1, 0]])
    out = distinct_edges(batch)
    b = out["user", "buys", "item"]
    assert b.edge_index.tolist() == [[0, 1, 2, 0], [3, 0, 1, 2]]
    assert b.edge.tolist() == [10, 11, 12, 13]
    assert b.edge_attr.tolist() == [[0, 1], [2, 3], [6, 7], [10, 11]]
    assert b.edge_weight.tolist() == pytest.approx([0.1, 0.2, 0.4, 0.6])
    assert out["item", "similar_to", "item"].edge_index.tolist() == [[0, 1], [1, 0]]
    homo = Data(x=torch.zeros(3, 1), edge_index=torch.tensor([[0, 0, 2], [1, 1, 0]]),
                edge=torch.tensor([5, 5, 6]))
    out = distinct_edges(homo)
    assert out.edge_index.tolist() == [[0, 2], [1, 0]] and out.edge.tolist() == [5, 6]
    assert out.x.shape == (3, 1)


def test_seed_batches_are_the_slices_torchs_dataloader_gives_and_shuffled_ones_stay_torchs():
    """slice_seed_batches: GLT's sampling workers get the batches torch's DataLoader gives over
    the same index tensor, in the same order (drop_last either way, a last short batch, an
    empty index); a shuffled loader, or one over something else than a 1-D tensor, is still
    torch's own."""
    import torch
    from graphlearn_torch.distributed import dist_sampling_producer
    from torch.utils.data import DataLoader

    from graphstore.dataset import glt_adapter

    glt_adapter.slice_seed_batches()
    glt_adapter.slice_seed_batches()  # idempotent
    patched = dist_sampling_producer.DataLoader
    assert patched is not DataLoader
    index = torch.randperm(1030, generator=torch.Generator().manual_seed(3))
    for data in (index, index[:0], index[:512]):
        for drop_last in (False, True):
            ours = list(patched(data, batch_size=512, shuffle=False, drop_last=drop_last))
            torchs = list(DataLoader(data, batch_size=512, shuffle=False, drop_last=drop_last))
            assert len(ours) == len(torchs) == len(patched(data, batch_size=512,
                                                           drop_last=drop_last))
            assert all(torch.equal(a, b) for a, b in zip(ours, torchs))
    it = patched(index, batch_size=100)._get_iterator()  # as GLT's collocated producer reads it
    assert torch.equal(next(it), index[:100])
    assert isinstance(patched(index, batch_size=8, shuffle=True), DataLoader)
    assert isinstance(patched(index.view(2, -1), batch_size=8), DataLoader)


def test_feature_rows_gathered_by_index_select_are_glts_rows():
    """gather_feature_rows: Feature.cpu_get returns the rows GLT's indexing returns, with a
    tensor id2index, a range partition's offset (OffsetId2Index) and none."""
    import torch
    from graphlearn_torch.data.feature import Feature
    from graphlearn_torch.partition.partition_book import OffsetId2Index

    from graphstore.dataset import glt_adapter

    gen = torch.Generator().manual_seed(5)
    x = torch.randn(50, 4, generator=gen)
    ids = torch.randint(0, 50, (200,), generator=gen)
    perm = torch.randperm(50, generator=gen)
    offset = 1000
    cases = [(None, ids, x[ids]), (perm, ids, x[perm[ids]]),
             (OffsetId2Index(offset), ids + offset, x[ids])]
    glt_adapter.gather_feature_rows()
    glt_adapter.gather_feature_rows()  # idempotent
    assert getattr(Feature.cpu_get, "uses_index_select", False)
    for id2index, asked, want in cases:
        feature = Feature(x, id2index=id2index, with_gpu=False)
        assert torch.equal(feature.cpu_get(asked), want)
        assert torch.equal(feature[asked], want)
