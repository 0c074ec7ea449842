"""The one place graphstore reaches into graphlearn-torch's (GLT's) globals and private API.

Every workaround here was written for, and measured with, ``graphlearn-torch==0.2.4`` (the pinned
stack: docs/stack.md); GLT offers no public hook for any of them. Before a workaround touches GLT
it checks that the installed GLT is that version (:func:`check_glt_version`): another version
fails with one line naming both versions, instead of patches landing on code they were not
written for. ``python -m graphstore.tools.doctor`` reports the same check.

=====================================  ==========================================================
what we reach into                     where it is applied
=====================================  ==========================================================
``dist_sampling_producer.mp``,         :func:`prepare_sampling_server`, once per storage session
``MP_STATUS_CHECK_INTERVAL``,          process, before its first loader (graphstore.modes.graph_store.server)
``DistServer.create_sampling_producer``
/ ``destroy_sampling_producer``
``DistServer.fetch_one_sampled_message``  :func:`prepare_sampling_server` (a dead sampling worker
                                       fails the fetch; a long wait is logged with the
                                       producer's state)
``DistServer._exit``                   :func:`server_session_finished` (the storage heartbeat)
``DistDataset.node_labels``            :func:`set_no_node_labels` (heterogeneous storage datasets)
``Graph.lazy_init`` (CPU),             :func:`skip_column_count` (storage sessions, colocated
``col_count`` / ``edge_count``         compute, graph-store sampling workers)
``dist_sampling_producer.DataLoader``  :func:`slice_seed_batches` (storage sessions, colocated
                                       compute, graph-store sampling workers)
``Feature.cpu_get``                    :func:`gather_feature_rows` (the same processes)
``RangePartitionBook`` fields          :func:`range_partition_book` (every node and edge
                                       partition book: storage datasets, ``fetch_*_partition_book``)
torch's ``UntypedStorage._new_shared`` :func:`shared_zeros` (every array a storage partition
                                       hands GLT, graphstore.dataset.partition_graph)
``EdgeSamplerInput.to`` /              :class:`LabeledEdgeInput` (the ABLP loader's inputs)
``share_memory``
the producers' ``len(input)`` /        :class:`HardNegativeEdgeInput` (ABLP inputs that draw hard
``input[index]`` batching              negatives into each batch, graphstore.dataset.hard_negatives)
``DistLoader._collate_fn``,            :class:`GltLoader`, the base of both loaders (graphstore.dataset.loaders)
``DistLoader.__iter__`` (remote)
``DistLoader.__init__`` on a built     :func:`init_dist_loader` (each dataset's ``start_loader``)
loader
``RemoteReceivingChannel``             :class:`FailFastReceivingChannel`, put in place by
                                       :func:`init_dist_loader` (graph-store loaders)
torch's ``rpc._set_rpc_timeout``       :func:`set_client_rpc_timeout` (graphstore.modes.graph_store.compute)
torch's ``_get_default_store``         :func:`default_store` (graphstore.modes.graph_store.compute,
                                       graphstore.modes.graph_store.info)
=====================================  ==========================================================

Each function documents the reason it exists, as measured here. Applying any of them twice is
harmless (each is idempotent). Importing this module imports neither torch nor GLT: the doctor
checks the version before it tries to import GLT, and :class:`LabeledEdgeInput`,
:class:`HardNegativeEdgeInput`, :class:`GltLoader` and
:class:`FailFastReceivingChannel` (GLT subclasses) are built the first time they are used
(module ``__getattr__``). torch's rendezvous store is patched by graphstore.runtime.rendezvous
(torch, not GLT).
"""

from __future__ import annotations

import collections
import contextlib
import importlib.metadata
import logging
import os
import queue
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from graphstore.runtime.errors import RuntimeFailure

_log = logging.getLogger(__name__)
GLT_DISTRIBUTION = "graphlearn-torch"
GLT_VERSION = "0.2.4"
"""The GLT release every workaround in this module was written for and measured with."""

_checked = False
_failed_servers: set[int] = set()
"""Storage ranks a loader's RPC to failed in this process (a fetch or an epoch start that passed
``rpcTimeoutS`` or found the server gone): :class:`GltLoader` shutdowns skip them. Every loader
of a failing compute process is shut down on its way out; each destroy request to a stopped
server would wait ``rpcTimeoutS`` and raise in ``__del__`` (measured: 36 s of tracebacks after
a 15 s fetch timeout, 3 loaders). GLT's RPC client is per process too."""
FETCH_REPORT_S = 30.0
"""A batch fetch still waiting after this long logs its producer's state once (workers that
finished the epoch, workers alive, the channel empty): a stall explains itself in the storage
session's log (:func:`_fetch_one_sampled_message`)."""
RECEIVE_WAIT_S = 0.5
"""How long a fetch waits for its channel (its lock, then a message) before it looks again
whether the epoch is over."""
FETCH_CHECK_S = 2.0
"""A waiting fetch looks at its producer's sampling workers this often."""
_worker_check = threading.Lock()
"""Held while a fetch polls its producer's worker processes: several RPC threads fetch from one
producer at once, and ``Popen.poll`` reads the worker's exit status once."""
SERVER_EXIT_POLL_S = 0.1
"""How often a storage session checks whether its clients asked it to exit
(:func:`prepare_sampling_server`)."""


def installed_glt_version() -> str | None:
    """The installed GLT distribution's version (its metadata; GLT is not imported), or None."""
    try:
        return importlib.metadata.version(GLT_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def glt_version_problem(installed: str | None) -> str | None:
    """Why ``installed`` (a GLT version, None: not installed) is not the version this module
    was written for, as one line; None when it is (a local build tag such as ``+cu121`` aside)."""
    if installed is not None and installed.split("+", 1)[0] == GLT_VERSION:
        return None
    found = "is not installed" if installed is None else f"{installed} is installed"
    return (f"{GLT_DISTRIBUTION} {found}, but graphstore's GLT workarounds "
            f"(graphstore/dataset/glt_adapter.py) were written for {GLT_VERSION}: install "
            f"{GLT_DISTRIBUTION}=={GLT_VERSION} (docs/stack.md; `make setup`)")


def check_glt_version() -> None:
    """Raise :class:`RuntimeFailure` unless the installed GLT is :data:`GLT_VERSION`.

    Checked once per process (a passing check is remembered); every workaround below calls it.
    """
    global _checked
    if _checked:
        return
    problem = glt_version_problem(installed_glt_version())
    if problem:
        raise RuntimeFailure(problem)
    _checked = True


# -- storage: sampling producers -------------------------------------------------------------------
def prepare_sampling_server(producer_join_s: float) -> None:
    """Prepare this process to host GLT sampling producers (a storage server session). Idempotent.

    * ``dist_sampling_producer.mp``: ``DistMpSamplingProducer.init`` starts every sampling worker
      with ``mp.get_context('spawn')`` on that module global, a fresh interpreter importing torch
      and GLT (4.4 s alone here): one loader took ~11 s to create with 2 ranks x 2 servers. It is
      replaced by a proxy whose ``spawn`` context is a forkserver that imported GLT once
      (graphstore.runtime.processes): loaders are ready in ~2.5-5 s.
    * ``dist_sampling_producer.MP_STATUS_CHECK_INTERVAL`` (5 s): how long GLT joins a sampling
      worker at shutdown before terminating it. A worker in the middle of an epoch never reads the
      stop command, so closing the 4 loaders of a 2-type training run on 2 servers cost 40 s; set
      to ``producer_join_s``. GLT reads it in this process only (its workers never do).
    * ``dist_server.SERVER_EXIT_STATUS_CHECK_INTERVAL`` (5 s): how often a server session polls
      whether its clients asked it to exit (``wait_and_shutdown_server``); the clients' graceful
      RPC shutdown waits for it, so every session's end cost 0-5 s (2.8-3.4 s measured). Set to
      :data:`SERVER_EXIT_POLL_S`.
    * ``DistServer.create_sampling_producer`` / ``destroy_sampling_producer`` hold the server's
      lock while a producer starts (its workers each join the loader's RPC group: ~1.1-2.1 s
      measured) or stops, so the producers the compute ranks ask for at once were made one rank
      after the other: a loader took (compute ranks) x that. The replacements keep GLT's
      bookkeeping under the lock and start or stop the producer outside it (a second request for
      the same ``worker_key`` waits for the first's producer and gets its id, as in GLT).
    * ``DistServer.fetch_one_sampled_message`` waits for the producer's next message until every
      sampling worker has counted the epoch as done; a worker process that died never counts it,
      so GLT's fetch waited until the client's ``rpcTimeoutS`` with no word on the server. The
      replacement (:func:`_fetch_one_sampled_message`) fails the fetch naming the dead worker and
      logs a long wait once. It also lets one fetch at a time receive from a producer's channel:
      GLT's fetches, several per loader at once, could claim a message never written and hang
      (:func:`_next_message`).
    """
    check_glt_version()
    from graphlearn_torch.distributed import dist_sampling_producer
    from graphlearn_torch.distributed.dist_server import DistServer

    from graphstore.runtime.processes import PreloadedMultiprocessing

    from graphlearn_torch.distributed import dist_server

    dist_sampling_producer.MP_STATUS_CHECK_INTERVAL = producer_join_s
    dist_server.SERVER_EXIT_STATUS_CHECK_INTERVAL = SERVER_EXIT_POLL_S
    if not isinstance(dist_sampling_producer.mp, PreloadedMultiprocessing):
        dist_sampling_producer.mp = PreloadedMultiprocessing(dist_sampling_producer.mp)
    DistServer.create_sampling_producer = _create_sampling_producer
    DistServer.destroy_sampling_producer = _destroy_sampling_producer
    DistServer.fetch_one_sampled_message = _fetch_one_sampled_message


def _create_sampling_producer(server: Any, sampler_input: Any, sampling_config: Any,
                              worker_options: Any) -> int:
    """GLT 0.2.4's ``DistServer.create_sampling_producer`` with the producer started outside the
    server's lock (:func:`prepare_sampling_server`)."""
    import threading

    from graphlearn_torch.channel import ShmChannel
    from graphlearn_torch.distributed.dist_sampling_producer import DistMpSamplingProducer
    from graphlearn_torch.sampler import RemoteSamplerInput

    if isinstance(sampler_input, RemoteSamplerInput):
        sampler_input = sampler_input.to_local_sampler_input(dataset=server.dataset)
    key = worker_options.worker_key
    with server._lock:
        starting = server.__dict__.setdefault("_graphstore_starting", {})
        producer_id = server._worker_key2producer_id.get(key)
        if producer_id is not None:
            started = starting.get(producer_id)
        else:
            producer_id = server._cur_producer_idx
            server._cur_producer_idx += 1
            server._worker_key2producer_id[key] = producer_id
            started = None
            starting[producer_id] = threading.Event()
    if started is not None:  # another request for this key is starting it
        started.wait()
        if producer_id not in server._producer_pool:
            raise RuntimeFailure(f"sampling producer {producer_id} ({key}) failed to start")
        return producer_id
    try:
        buffer = ShmChannel(worker_options.buffer_capacity, worker_options.buffer_size)
        producer = DistMpSamplingProducer(server.dataset, sampler_input, sampling_config,
                                          worker_options, buffer)
        producer.init()
    except BaseException:
        with server._lock:
            server._worker_key2producer_id.pop(key, None)
            starting.pop(producer_id).set()
        raise
    with server._lock:
        server._producer_pool[producer_id] = producer
        server._msg_buffer_pool[producer_id] = buffer
        server._epoch[producer_id] = -1
        starting.pop(producer_id).set()
    return producer_id


def _fetch_one_sampled_message(server: Any, producer_id: int) -> tuple[Any, bool]:
    """GLT 0.2.4's ``DistServer.fetch_one_sampled_message``: the producer's next message, or
    ``(None, True)`` once every sampling worker finished the epoch and the channel is empty; an
    unknown producer gives ``(None, False)``, as in GLT. Added: one fetch at a time receives
    from the producer's channel (:func:`_next_message`); while it waits, every
    :data:`FETCH_CHECK_S` it looks at the producer's workers; one that exited before the producer
    was shut down fails the fetch with a ``RuntimeFailure`` naming it (the client raises it with
    this server named); a fetch still running after :data:`FETCH_REPORT_S`, wherever it is
    stuck, is reported once by :class:`_FetchWatch`."""
    producer = server._producer_pool.get(producer_id, None)
    if producer is None:
        _log.warning("batch fetch for unknown sampling producer %d", producer_id)
        return None, False
    buffer = server._msg_buffer_pool.get(producer_id, None)
    with _fetch_watch.watching(producer_id, producer):
        if _epoch_done(producer, buffer):
            return None, True
        return _next_message(producer_id, producer, buffer)


def _epoch_done(producer: Any, buffer: Any) -> bool:
    """Every sampling worker of ``producer`` finished the epoch and its channel ``buffer`` holds
    nothing, checked in that order: a worker counts the epoch done after its last send, so a
    channel found empty then stays empty. (GLT 0.2.4 looks at the channel first: a worker's
    last send and count between the two looks ended the epoch with a message left behind, read
    as the next epoch's first.)"""
    return producer.is_all_sampling_completed() and buffer.empty()


def _next_message(producer_id: int, producer: Any, buffer: Any) -> tuple[Any, bool]:
    """The next message of ``producer``'s channel ``buffer``, or ``(None, True)`` at the end of
    its epoch; raises when one of its sampling workers died (:func:`_fetch_one_sampled_message`).

    One fetch at a time receives from a channel (the lock :func:`_receiving`): GLT 0.2.4's
    shared-memory queue is not safe for two readers. ``ShmQueue::Dequeue`` checks that a
    message is there and claims the next block id in two steps, so two fetches polling one
    channel can both pass the check for its one message; the second then waits, past its
    timeout, for a block that is written only when a worker sends again. After an epoch's last
    message nobody does (the client waits for that fetch before it starts the next epoch): the
    fetch hung until the client's ``rpcTimeoutS``, with every worker done and the channel
    "not empty" (its read id past its write id). The client keeps ``prefetch_size`` fetches in
    flight per server, so every loader had several readers; measured on a bare channel with 4
    reader threads: 6 such claims in 10 364 messages, none with the lock
    (tests/unit/test_glt_adapter.py)."""
    from graphlearn_torch.channel import QueueTimeoutError

    receiving = _receiving(buffer)
    last_check = time.monotonic()
    while True:
        if receiving.acquire(timeout=RECEIVE_WAIT_S):
            try:
                return buffer.recv(timeout_ms=int(RECEIVE_WAIT_S * 1000)), False
            except QueueTimeoutError:
                pass
            finally:
                receiving.release()
        if _epoch_done(producer, buffer):
            return None, True
        now = time.monotonic()
        if now - last_check < FETCH_CHECK_S or producer._shutdown:
            continue
        last_check = now
        with _worker_check:
            exits = [w.exitcode for w in producer._workers]
        dead = [(rank, w.pid, code) for rank, (w, code) in enumerate(zip(producer._workers, exits))
                if code is not None]
        if dead and not producer._shutdown:
            rank, pid, code = dead[0]
            raise RuntimeFailure(
                f"sampling producer {producer_id}: sampling worker {rank} (pid {pid}) exited with "
                f"code {code} before finishing the epoch (see this storage session's log)")


def _receiving(buffer: Any) -> threading.Lock:
    """The lock a fetch holds while it receives from ``buffer`` (:func:`_next_message`), kept on
    the channel object (one per sampling producer)."""
    return buffer.__dict__.setdefault("_graphstore_receiving", threading.Lock())


class _FetchWatch:
    """The batch fetches running in this storage session, and one daemon thread that reports
    any still running after :data:`FETCH_REPORT_S`, wherever it is stuck (waiting for a batch,
    or inside GLT's channel), once per producer: its epoch state, then every thread's stack of
    this session and of the producer's sampling workers (graphstore.runtime.stack_dumps). The thread
    starts with the first fetch."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[int, tuple[int, Any, float]] = {}  # call id -> (producer id, producer, start)
        self._reported: set[int] = set()  # producer ids
        self._next_id = 0
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def watching(self, producer_id: int, producer: Any) -> Iterator[None]:
        with self._lock:
            call, self._next_id = self._next_id, self._next_id + 1
            self._running[call] = (producer_id, producer, time.monotonic())
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="graphstore-fetch-watch",
                                                daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                del self._running[call]

    def _watch(self) -> None:
        while True:
            time.sleep(FETCH_CHECK_S)
            now = time.monotonic()
            with self._lock:
                stalled = {pid: (producer, now - start) for pid, producer, start in self._running.values()
                           if now - start > FETCH_REPORT_S and pid not in self._reported}
                self._reported.update(stalled)
            for producer_id, (producer, waited_s) in stalled.items():
                _report_stalled_fetch(producer_id, producer, waited_s)


_fetch_watch = _FetchWatch()


def _report_stalled_fetch(producer_id: int, producer: Any, waited_s: float) -> None:
    """Log a fetch from ``producer`` that has run ``waited_s``: the producer's epoch state, then
    every thread's stack of this session and (forkserver workers only, see
    graphstore.runtime.stack_dumps) of each sampling worker, all into this session's log."""
    from graphstore.runtime import stack_dumps

    pids = [w.pid for w in producer._workers]
    alive = sum(1 for w in producer._workers if w.exitcode is None)
    _log.warning("sampling producer %d: a batch fetch has run %.0f s: %d of %d sampling workers "
                 "(pids %s, %d alive) finished the epoch; the stacks of this session and of "
                 "those workers follow", producer_id, waited_s,
                 producer.sampling_completed_worker_count.value, producer.num_workers,
                 ", ".join(map(str, pids)), alive)
    stack_dumps.dump_here()
    from graphlearn_torch.distributed import dist_sampling_producer  # imported: GLT serves here

    if getattr(dist_sampling_producer.mp, "answers_stack_dumps", False):
        for pid in pids:
            stack_dumps.request_dump(pid)
    # last: a channel whose lock is stuck would block here
    _log.warning("sampling producer %d: its channel is empty: %s", producer_id,
                 producer.output_channel.empty())


def _destroy_sampling_producer(server: Any, producer_id: int) -> None:
    """GLT 0.2.4's ``DistServer.destroy_sampling_producer`` with the producer stopped outside the
    server's lock (:func:`prepare_sampling_server`)."""
    with server._lock:
        producer = server._producer_pool.pop(producer_id, None)
        if producer is None:
            return
        server._msg_buffer_pool.pop(producer_id)
        server._epoch.pop(producer_id)
    producer.shutdown()


# GLT's ``_call_func_on_server`` passes the server as first argument only to a function whose
# ``__name__`` is a ``DistServer`` attribute
_create_sampling_producer.__name__ = "create_sampling_producer"
_destroy_sampling_producer.__name__ = "destroy_sampling_producer"
_fetch_one_sampled_message.__name__ = "fetch_one_sampled_message"


def server_session_finished() -> bool:
    """True when this process's GLT server is gone or its clients have shut it down.

    GLT 0.2.4 has no public "has exited" on ``DistServer``; its ``_exit`` flag is set when the
    client group's shutdown reaches the server. The storage heartbeat reads it so that clients
    that left because the session ended are not reported as dead peers.
    """
    check_glt_version()
    from graphlearn_torch.distributed.dist_server import get_server

    server = get_server()
    return server is None or bool(getattr(server, "_exit", False))


# -- sampling workers: a failed batch ends the worker ----------------------------------------------
EXIT_FAILED_BATCH = 1
"""The exit code of a sampling worker one of whose batches raised (:func:`exit_on_failed_batch`)."""


def exit_on_failed_batch(exit_process: Callable[[int], None] = os._exit) -> None:
    """Make a sampling batch that raises end its worker process instead of being lost. Idempotent.

    GLT 0.2.4 samples each batch as a coroutine (``ConcurrentEventLoop.add_task``) and, when it
    raises, only logs ``coroutine task failed: <message>``, without a traceback: the batch is
    lost, the worker still counts its epoch done, and the loader yields one batch fewer with no
    error (GiGL found the same, Snapchat/GiGL PR 693). Here the traceback is logged and the
    worker exits with :data:`EXIT_FAILED_BATCH`; the storage session's fetch then fails naming
    that worker (:func:`_next_message`), and the compute rank with it. Installed in every
    graph-store sampling worker by its forkserver (``graphstore.dataset.sampling_worker``);
    ``exit_process`` is for tests."""
    import asyncio

    check_glt_version()
    from graphlearn_torch.distributed.event_loop import ConcurrentEventLoop

    def add_task(loop: Any, coro: Any, callback: Any = None) -> None:
        def on_done(f: Any) -> None:
            try:
                result = f.result()
                if callback is not None:
                    callback(result)
            except Exception:  # noqa: BLE001 (logged with its traceback, then the worker ends)
                _log.exception("sampling worker (pid %d): a batch failed; ending this worker so "
                               "that its producer's fetch fails naming it", os.getpid())
                for stream in (sys.stdout, sys.stderr):
                    stream.flush()
                exit_process(EXIT_FAILED_BATCH)
            loop._sem.release()
        loop._sem.acquire()
        asyncio.run_coroutine_threadsafe(coro, loop._loop).add_done_callback(on_done)

    ConcurrentEventLoop.add_task = add_task


def skip_column_count() -> None:
    """Build GLT's CPU graphs without counting their distinct columns. Idempotent.

    GLT 0.2.4's ``Graph.lazy_init`` (CPU mode) calls the C++ ``init_cpu_from_csr``, which keeps
    the row pointer, columns and edge ids as raw pointers (the Python ``Topology`` keeps the
    tensors alive) and also counts the distinct columns with ``at::_unique`` over every edge: a
    sorted copy and its permutation, measured ~2 s and ~200 MiB at the peak per 9 M edges, in
    the storage session and again in every sampling worker (each rebuilds its graphs), at the
    moment a loader starts. The count only answers ``Graph.col_count``; the CPU samplers read the
    pointers and the row count. Here the C++ graph gets the first element of the columns (and
    of the edge ids and weights: it checks their lengths agree), which holds the same pointer,
    and ``col_count`` / ``edge_count`` are answered from the topology when asked. Applied by
    :func:`graphstore.dataset.partition_graph.glt_dataset` (the storage session, colocated
    compute) and in every graph-store sampling worker (``graphstore.dataset.sampling_worker``).
    """
    check_glt_version()
    import torch
    from graphlearn_torch import py_graphlearn_torch as pywrap
    from graphlearn_torch.data.graph import Graph

    if getattr(Graph.lazy_init, "skips_column_count", False):
        return
    full_init = Graph.lazy_init

    def lazy_init(self: Any) -> None:
        if self._graph is not None or self.mode != "CPU":
            full_init(self)
            return
        topo = self.topo
        head = min(1, topo.indices.numel())  # a view from the first element: the same data_ptr
        none = torch.empty(0)
        graph = pywrap.Graph()
        graph.init_cpu_from_csr(
            topo.indptr, topo.indices[:head],
            topo.edge_ids[:head] if topo.edge_ids is not None else none,
            topo.edge_weights[:head] if topo.edge_weights is not None else none)
        self._graph = graph

    lazy_init.skips_column_count = True  # type: ignore[attr-defined]
    Graph.lazy_init = lazy_init
    Graph.col_count = property(lambda self: int(torch.unique(self.topo.indices).numel()))
    Graph.edge_count = property(lambda self: int(self.topo.edge_count))  # GLT's own count


class _SeedBatches:
    """What GLT's sampling worker loop iterates instead of ``DataLoader(seeds_index,
    batch_size, shuffle=False, drop_last)``: consecutive slices of the 1-D index tensor, the
    same batches in the same order (views, no copy)."""

    def __init__(self, index: Any, batch_size: int, drop_last: bool) -> None:
        self.index, self.batch_size, self.drop_last = index, int(batch_size), bool(drop_last)

    def __len__(self) -> int:
        n = int(self.index.numel())
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self)):
            yield self.index[i * self.batch_size:(i + 1) * self.batch_size]

    def _get_iterator(self) -> Iterator[Any]:  # DataLoader's, which GLT's collocated producer calls
        return iter(self)


def slice_seed_batches() -> None:
    """Cut GLT's seed batches as tensor slices instead of through torch's ``DataLoader``.
    Idempotent.

    GLT 0.2.4's sampling workers (``_sampling_worker_loop``) and collocated producer batch the
    seed indices with ``DataLoader(index_tensor, batch_size, ...)``: per batch it indexes the
    tensor once per seed (512 0-d tensors) and stacks them (``default_collate``). Profiled with
    py-spy in ``benchmarks/sampling.py --profile-graph-store`` (1 M edges, batch 512,
    2026-12-07) it showed in ~20% of the busiest storage sampling worker's samples; timed alone
    (100 k seeds, batch 512, one thread) 1.86 ms per batch against 0.008 ms for the slices. Here
    ``dist_sampling_producer.DataLoader`` builds :class:`_SeedBatches` (the same batches in the
    same order) when the index is a 1-D tensor and is not shuffled, and torch's ``DataLoader``
    otherwise. Applied in every graph-store sampling worker (``graphstore.dataset.sampling_worker``)
    and by :func:`graphstore.dataset.partition_graph.glt_dataset` (storage sessions, colocated
    compute)."""
    check_glt_version()
    import torch
    from graphlearn_torch.distributed import dist_sampling_producer

    torch_loader = dist_sampling_producer.DataLoader
    if getattr(torch_loader, "slices_seed_batches", False):
        return

    def loader(data: Any, batch_size: int = 1, shuffle: bool = False, drop_last: bool = False,
               **kwargs: Any) -> Any:
        if not shuffle and not kwargs and isinstance(data, torch.Tensor) and data.dim() == 1:
            return _SeedBatches(data, batch_size, drop_last)
        return torch_loader(data, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last,
                            **kwargs)

    loader.slices_seed_batches = True  # type: ignore[attr-defined]
    dist_sampling_producer.DataLoader = loader


def gather_feature_rows() -> None:
    """Gather GLT's CPU feature rows with ``index_select`` instead of advanced indexing.
    Idempotent.

    GLT 0.2.4's ``Feature.cpu_get`` (every local feature lookup of a sampled batch, and every
    remote one a storage server answers) is ``feature_tensor[id2index[ids]]`` (``id2index``: a
    tensor, or the offset of a range partition, graphstore's case). Measured here
    (17.8 k rows of 16 float32, one thread, 2026-12-07): torch's advanced indexing 1.2 ms,
    ``torch.index_select`` 0.42 ms, the same rows. Applied where :func:`slice_seed_batches` is.
    """
    check_glt_version()
    import torch
    from graphlearn_torch.data.feature import Feature

    if getattr(Feature.cpu_get, "uses_index_select", False):
        return

    def cpu_get(self: Any, ids: Any) -> Any:
        self.lazy_init_with_ipc_handle()
        ids = ids.to("cpu")
        index = self.id2index  # a tensor, or GLT's OffsetId2Index (ours: range partitions)
        if isinstance(index, torch.Tensor):
            ids = torch.index_select(index, 0, ids)
        elif index is not None:
            ids = index[ids]
        return torch.index_select(self.feature_tensor, 0, ids)

    cpu_get.uses_index_select = True  # type: ignore[attr-defined]
    Feature.cpu_get = cpu_get


def set_no_node_labels(dataset: Any) -> None:
    """Give a heterogeneous GLT ``DistDataset`` a placeholder ``node_labels``. Idempotent.

    GLT 0.2.4's heterogeneous sampler asserts that ``node_labels`` is a dict, and wraps a dict of
    features (or an empty dict) into a remote feature that it then queries; a dict without any
    real node type key passes the assert and is skipped at lookup. Our labels are edges
    (supervision edge types), never node labels.
    """
    check_glt_version()
    import torch

    dataset.node_labels = {"__no_node_labels__": torch.empty(0, dtype=torch.long)}


def shared_zeros(shape: "tuple[int, ...]", dtype: Any) -> Any:
    """A torch tensor of zeros in shared memory whose untouched pages take no memory.

    GLT 0.2.4 puts every graph and feature tensor it is given into shared memory
    (``share_memory_``), copying one that is not there yet: a second copy alive while it runs.
    A tensor made here is shared already, so GLT keeps it as it is, and it reaches the session
    process and its sampling workers as a handle. Its pages are those of a sparse shared-memory
    file, allocated when first written: GLT's CPU graph indexes its row pointer by global node
    id, so a partition's row pointer spans ids ``0 .. end of its range``, and the rows below its
    range are never written (they read as 0, no edges), never resident. ``torch.zeros(...)
    .share_memory_()`` would write every page.
    """
    import math

    import torch

    count = math.prod(shape)
    nbytes = count * torch.empty(0, dtype=dtype).element_size()
    storage = torch.UntypedStorage._new_shared(max(nbytes, 1))
    return torch.empty(0, dtype=dtype).set_(storage, 0, (count,)).view(shape)


def range_partition_book(bounds: "tuple[int, ...]", partition: int = 0) -> Any:
    """GLT's ``RangePartitionBook`` for ``P + 1`` ``bounds`` (partition ``p`` owns
    ``[bounds[p], bounds[p + 1])``), ``partition`` the one whose ids its ``id2index`` offsets
    (meaningful on storage only). ``book[ids]`` is the partition of each id.

    GLT 0.2.4's constructor refuses an empty range (``start < end`` for every partition), which a
    node type with fewer nodes than partitions has; its lookup (``searchsorted`` over the range
    ends, ``right=True``) handles one correctly, so the fields are set directly.
    """
    check_glt_version()
    import torch
    from graphlearn_torch.partition import RangePartitionBook
    from graphlearn_torch.partition.partition_book import OffsetId2Index

    if len(bounds) < 2 or bounds[0] != 0 or any(b > c for b, c in zip(bounds, bounds[1:])):
        raise ValueError(f"range bounds must start at 0 and not decrease, got {bounds}")
    if not 0 <= partition < len(bounds) - 1:
        raise ValueError(f"partition {partition} not in [0, {len(bounds) - 1})")
    book = RangePartitionBook.__new__(RangePartitionBook)
    book.partition_bounds = torch.tensor(bounds[1:], dtype=torch.long)
    book.partition_idx = partition
    book._id2index = OffsetId2Index(bounds[partition])
    return book


# -- compute: loaders ------------------------------------------------------------------------------
def init_dist_loader(loader: Any, data: Any, inputs: Any, config: Any, device: Any,
                     worker_options: Any) -> None:
    """Run GLT's ``DistLoader.__init__`` on ``loader``, an instance our loader classes are
    already building.

    Our loaders (graphstore.dataset.loaders) check and convert their inputs in their own ``__init__``;
    which GLT mode the loader runs in (remote sampling workers on the storage servers, or inline
    sampling on this machine's partition) is known only to the dataset, which therefore finishes
    the construction with its own ``data`` (None in remote mode) and worker options
    (``GraphDataset.start_loader``).
    """
    check_glt_version()
    from graphlearn_torch.channel import RemoteReceivingChannel
    from graphlearn_torch.distributed import DistLoader

    one_pass_link_sampling()  # colocated mode samples in this process
    DistLoader.__init__(loader, data, inputs, config, device, worker_options)
    channel = getattr(loader, "_channel", None)
    if type(channel) is RemoteReceivingChannel:  # graph-store mode: batches come over RPC
        loader._channel = __getattr__("FailFastReceivingChannel")(
            channel.server_rank_list, channel.producer_id_list, channel.prefetch_size)


def set_client_rpc_timeout(timeout_s: float) -> None:
    """Set this RPC agent's default timeout (graph-store compute processes, after
    ``init_client``).

    GLT 0.2.4's ``init_client`` takes no RPC timeout and starts the agent with GLT's default
    (180 s), and torch 2.3 has no public setter once the agent runs, so ``rpcTimeoutS`` is set
    through torch's ``rpc._set_rpc_timeout``.
    """
    check_glt_version()
    from torch.distributed import rpc

    rpc._set_rpc_timeout(timeout_s)


def default_store() -> Any:
    """The key-value store of this process's default process group (torch's private
    ``_get_default_store``; torch 2.3 has no public accessor).

    Used where peers must agree on values without a collective: the cluster-info exchange
    (destroying a gloo group right after an object collective deadlocked here in torch 2.3,
    graphstore.modes.graph_store.info) and the port of each colocated loader's sampling group, published
    by compute rank 0 under the loader's creation index (graphstore.modes.graph_store.compute).
    """
    from torch.distributed.distributed_c10d import _get_default_store

    return _get_default_store()


# -- GLT subclasses, built on first use ------------------------------------------------------------
def _as_module_level(cls: type) -> type:
    """Name ``cls`` as this module's attribute, so pickle finds it by name (inputs travel to
    the storage servers over RPC): ``graphstore.dataset.glt_adapter.<name>`` resolves through
    ``__getattr__`` to this very class."""
    cls.__module__ = __name__
    cls.__qualname__ = cls.__name__
    return cls


def _labeled_edge_input() -> type:
    from graphlearn_torch.sampler import EdgeSamplerInput

    class LabeledEdgeInput(EdgeSamplerInput):
        """An ``EdgeSamplerInput`` with labels and without GLT's random negatives.

        GLT 0.2.4's ``EdgeSamplerInput.to`` / ``share_memory`` touch ``neg_sampling`` whenever a
        label is set, and crash when it is None. The ABLP loader needs a label tensor (with
        ``label=None`` GLT puts a None into the sample message, its shared-memory queue rejects
        it and the batch is silently lost, seen here) and no negatives, so this input stays on
        the CPU and shares only its tensors."""

        def to(self, device: Any) -> "LabeledEdgeInput":
            return self

        def share_memory(self) -> "LabeledEdgeInput":
            for t in (self.row, self.col, self.label):
                t.share_memory_()
            return self

    return _as_module_level(LabeledEdgeInput)


def _hard_negative_edge_input() -> type:
    import numpy as np
    import torch

    from graphstore.dataset.hard_negatives import AnchorNegatives, batch_rows

    labeled = __getattr__("LabeledEdgeInput")

    class HardNegativeEdgeInput(labeled):
        """(anchor, positive) pairs whose every batch also brings its anchors' hard negatives.

        GLT 0.2.4's sampling producers (the storage's ``DistMpSamplingProducer`` workers and the
        in-process ``DistCollocatedSamplingProducer``) cut an edge input into batches only through
        ``len(input)`` and ``input[index]`` (a tensor of row positions per batch, shuffled or
        not), then sample that batch's rows; there is no hook to add seeds to a batch. This input
        keeps ``len`` = its pairs (``batch_size`` still counts pairs) and answers ``[index]`` with
        a :class:`LabeledEdgeInput` of those pairs (label 1) followed by up to ``per_anchor``
        negatives of each distinct anchor (label 0), drawn by graphstore.dataset.hard_negatives with a
        generator seeded by ``seed`` in each sampling process (made on first use there)."""

        def __init__(self, row: Any, col: Any, input_type: Any, negatives: AnchorNegatives,
                     per_anchor: int, seed: int) -> None:
            super().__init__(row, col, torch.ones(row.numel(), dtype=torch.long), input_type)
            self.negatives, self.per_anchor, self.seed = negatives, int(per_anchor), int(seed)
            self._rng: Any = None

        def __getitem__(self, index: Any) -> Any:
            if not isinstance(index, torch.Tensor):
                index = torch.tensor(index, dtype=torch.long)
            if self._rng is None:
                self._rng = np.random.default_rng(self.seed)
            row, col, label = batch_rows(self.row[index], self.col[index], self.negatives,
                                         self.per_anchor, self._rng)
            return labeled(row, col, label, self.input_type)

        def share_memory(self) -> "HardNegativeEdgeInput":
            super().share_memory()
            self.negatives.share_memory_()
            return self

        def __getstate__(self) -> dict[str, Any]:
            state = dict(self.__dict__)
            state["_rng"] = None  # each sampling process seeds its own
            return state

    return _as_module_level(HardNegativeEdgeInput)


class _SeedEveryType:
    """A GLT inducer whose next ``init_node`` seeds the node types in :attr:`seeds` (once), not
    the one type it is given; everything else is the inducer's. It goes back into the sampler's
    inducer pool like the inducer it wraps, and is reused (never wrapped twice)."""

    def __init__(self, inducer: Any) -> None:
        self._inducer = inducer
        self.seeds: dict | None = None

    def init_node(self, seeds: Any) -> Any:
        if self.seeds is not None:
            seeds, self.seeds = self.seeds, None
        return self._inducer.init_node(seeds)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inducer, name)


async def _one_pass_edge_sampling(sampler: Any, inputs: Any) -> Any:
    """GLT's ``_sample_from_edges`` for a supervision type between two node types without GLT's
    negative sampling, in one pass (see :func:`one_pass_link_sampling`): the anchors and the
    label nodes are the seeds of one ``_sample_from_nodes`` walk (one inducer, so a node is
    expanded once, at the first hop it is reached), and ``edge_label_index`` indexes the nodes
    the walk returns, as GLT's own output does."""
    import torch
    from graphlearn_torch.sampler import NodeSamplerInput
    from graphlearn_torch.utils import id2idx

    etype = inputs.input_type
    src, dst = inputs.row.to(sampler.device), inputs.col.to(sampler.device)
    label = None if inputs.label is None else inputs.label.to(sampler.device)
    seeds = {etype[0]: src.unique(), etype[-1]: dst.unique()}

    def acquire_once() -> Any:  # runs before the walk's first await: no other batch sees it
        del sampler._acquire_inducer
        inducer = sampler._acquire_inducer()
        if not isinstance(inducer, _SeedEveryType):
            inducer = _SeedEveryType(inducer)
        inducer.seeds = seeds
        return inducer

    sampler._acquire_inducer = acquire_once
    try:
        out = await sampler._sample_from_nodes(NodeSamplerInput(node=seeds[etype[0]],
                                                                input_type=etype[0]))
    finally:  # a walk that failed before acquiring must not leave the override behind
        sampler.__dict__.pop("_acquire_inducer", None)
    index = [id2idx(out.node[etype[0]])[src], id2idx(out.node[etype[-1]])[dst]]
    out.metadata.update({"edge_label_index": torch.stack(index, dim=0), "edge_label": label})
    out.input_type = etype
    return out


def one_pass_link_sampling() -> None:
    """Sample an ABLP batch between two node types in one pass, as the other modes do.
    Idempotent; installed wherever GLT samples: every graph-store sampling worker
    (graphstore.dataset.sampling_worker) and every process that creates a loader
    (:func:`init_dist_loader`: colocated mode samples there, inline).

    GLT 0.2.4's ``DistNeighborSampler._sample_from_edges`` samples the anchors' and the label
    nodes' neighbourhoods in two separate walks and concatenates their edges
    (``merge_hetero_sampler_output``): a label node next to its anchor is expanded in both walks
    (its fan-out twice, at two hops), so a training batch's positives have larger, partly
    repeated neighbourhoods than the random negatives and candidates a neighbour loader samples
    (one walk). Inputs of one node type, homogeneous graphs and GLT's own negative sampling
    (unused here) keep GLT's code."""
    check_glt_version()
    from graphlearn_torch.distributed.dist_neighbor_sampler import DistNeighborSampler

    if getattr(DistNeighborSampler, "_graphstore_one_pass", False):
        return
    glt_sample_from_edges = DistNeighborSampler._sample_from_edges

    async def sample_from_edges(self: Any, inputs: Any) -> Any:
        etype = inputs.input_type
        if etype is None or etype[0] == etype[-1] or inputs.neg_sampling is not None:
            return await glt_sample_from_edges(self, inputs)
        return await _one_pass_edge_sampling(self, inputs)

    DistNeighborSampler._sample_from_edges = sample_from_edges
    DistNeighborSampler._graphstore_one_pass = True


EDGE_ATTRIBUTES = ("edge", "edge_attr", "edge_weight")
"""Per-edge attributes of a GLT batch's edge stores, kept aligned with ``edge_index``: edge ids
(``with_edge``), edge features, weights."""


def distinct_edges(data: Any) -> Any:
    """``data`` (a collated ``Data`` / ``HeteroData``) with each edge of each edge type once: the
    first occurrence of every (src, dst) local index pair is kept, in order, and the
    :data:`EDGE_ATTRIBUTES` with it. Nodes are untouched.

    Why: GLT 0.2.4 repeats edges in two ways. Its CPU sampler draws a node's neighbours with
    replacement when the degree exceeds the fan-out (tests/unit/test_glt_adapter.py pins it),
    so one neighbour can come twice; and for a supervision type between two node types its link
    sampling (``DistNeighborSampler._sample_from_edges``) samples the anchors' and the label
    nodes' neighbourhoods in two separate passes and merges them
    (``merge_hetero_sampler_output``: nodes merged, edges concatenated), so every edge both
    passes reached is in the batch twice. Measured on the demo data: about a quarter of a
    training batch's edges were repeats, none in replicated mode's batches (its sampler walks
    all seeds in one pass, without replacement). A mean aggregation counts a repeated neighbour
    twice, so the repeats change what the model computes, not only its cost."""
    import torch

    for store in data.edge_stores:
        ei = store["edge_index"] if "edge_index" in store else None
        if ei is None or ei.size(1) < 2:
            continue
        width = int(ei[1].max()) + 1
        key = ei[0] * width + ei[1]
        uniq, inverse = torch.unique(key, return_inverse=True)
        if uniq.numel() == key.numel():
            continue
        first = torch.full((uniq.numel(),), key.numel(), dtype=torch.long)
        first.scatter_reduce_(0, inverse, torch.arange(key.numel()), reduce="amin")
        keep = first.sort().values
        store["edge_index"] = ei[:, keep]
        for name in EDGE_ATTRIBUTES:
            value = store[name] if name in store else None
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.size(0) == key.numel():
                store[name] = value[keep]
    return data


def _glt_loader() -> type:
    from graphlearn_torch.distributed import DistLoader

    class GltLoader(DistLoader):
        """GLT's ``DistLoader`` with a public per-batch hook, :meth:`finish_batch`, and a named
        error when a storage server does not start an epoch.

        GLT 0.2.4 builds each batch in its private ``DistLoader._collate_fn`` and has no other
        hook; the ABLP loader adds its label pairs there (``batch.y_positive`` ...), so the
        override lives here once and loaders implement ``finish_batch``. In graph-store mode
        ``iter()`` asks every storage server to start the epoch (a synchronous RPC each, bounded
        by ``rpcTimeoutS``); GLT lets a failed request escape as a bare ``RuntimeError``, so
        :meth:`__iter__` does GLT's same steps with the server named in a ``RuntimeFailure``."""

        def __iter__(self) -> Any:
            if self._is_collocated_worker or self._is_mp_worker:
                return super().__iter__()
            from graphlearn_torch.distributed import DistServer, request_server

            self._num_recv = 0
            for server_rank, producer_id in zip(self._server_rank_list, self._producer_id_list):
                try:
                    request_server(server_rank, DistServer.start_new_epoch_sampling, producer_id,
                                   self._epoch)
                except RuntimeError as exc:
                    raise _storage_rpc_failure(f"starting epoch {self._epoch} on", server_rank,
                                               producer_id, exc, "request") from exc
            self._channel.reset()
            self._epoch += 1
            return self

        def shutdown(self) -> None:
            """GLT's shutdown, but in graph-store mode the producers of every storage server are
            destroyed at once (GLT asks one server after the other; each takes up to the
            producer join time, graphstore.modes.graph_store.server.PRODUCER_JOIN_S), servers that already
            failed an RPC of this process are skipped, and a failed destroy request is one
            warning line, not an exception (shutdown runs on the way out of a failure, and from
            ``__del__``)."""
            if self._shutdowned or self._is_collocated_worker or self._is_mp_worker:
                return super().shutdown()
            from graphlearn_torch.distributed import DistServer, async_request_server
            from graphlearn_torch.distributed.rpc import rpc_is_initialized

            self._shutdowned = True  # once, even when a destroy request fails below
            if rpc_is_initialized() is not True:
                return
            futures = [(rank, pid, async_request_server(rank, DistServer.destroy_sampling_producer,
                                                        pid))
                       for rank, pid in zip(self._server_rank_list, self._producer_id_list)
                       if rank not in _failed_servers]
            for rank, pid, fut in futures:
                try:
                    fut.wait()
                except RuntimeError as exc:  # recorded there: later shutdowns skip the server
                    _log.warning("%s", _storage_rpc_failure("destroying its producer on", rank,
                                                            pid, exc, "request"))

        def _collate_fn(self, msg: Any) -> Any:
            return self.finish_batch(distinct_edges(super()._collate_fn(msg)))

        def finish_batch(self, data: Any) -> Any:
            """Complete one collated batch (``Data`` / ``HeteroData``); the default keeps it."""
            return data

    return _as_module_level(GltLoader)


def _storage_rpc_failure(what: str, server_rank: int, producer_id: int, exc: BaseException,
                         request: str) -> RuntimeFailure:
    """The one-line error of a graph-store loader's failed RPC to a storage server (recorded in
    :data:`_failed_servers`), e.g.
    ``graph-store loader: fetching a sampled batch from storage rank 1 (producer 3) failed:
    RuntimeError: ...``."""
    _failed_servers.add(server_rank)
    kind = type(exc).__name__
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if lines and re.match(r"(\w+: )?On WorkerInfo\(", lines[0]):
        lines = lines[1:]  # torch RPC: the server raised; its repr(exception) follows
        raised = re.fullmatch(r"(\w+)\((['\"])(.*)\2\)", lines[0]) if lines else None
        if raised:
            kind, lines[0] = raised.group(1), raised.group(3)
    first = lines[0][:300] if lines else ""
    return RuntimeFailure(
        f"graph-store loader: {what} storage rank {server_rank} (producer {producer_id}) failed: "
        f"{kind}: {first} (rpcTimeoutS bounds each {request}; see that server's "
        "log)")


def _fail_fast_receiving_channel() -> type:
    from graphlearn_torch.channel import RemoteReceivingChannel

    class FailFastReceivingChannel(RemoteReceivingChannel):
        """GLT's pull channel of a graph-store loader, with failed fetches raised, not lost.

        GLT 0.2.4 prefetches each batch with an async ``fetch_one_sampled_message`` RPC per
        server; when one fails (its ``rpcTimeoutS`` passed, the server went away) the callback
        only logs "broken future of receiving remote messages" and puts nothing in the queue, so
        ``recv`` waits on ``queue.get()`` forever. Seen here on ``medium``: a storage session's
        fetch waited for a batch its producer never made, the client's RPC timed out after 300 s,
        and the compute rank then hung (its peers in a collective with it) until gloo's timeout.
        Here the failure goes into the queue and ``recv`` raises a ``RuntimeFailure`` naming the
        storage server; the epoch bookkeeping (requests, receipts, end of epoch per server) is
        GLT's, unchanged."""

        def _request_some(self) -> None:
            from graphlearn_torch.distributed import DistServer, async_request_server

            for idx, server_rank in enumerate(self.server_rank_list):
                if self.server_end_of_epoch[idx]:
                    continue
                missing = self.num_received_list[idx] + self.prefetch_size \
                    - self.num_request_list[idx]
                for _ in range(missing):
                    self._sent_at().setdefault(idx, collections.deque()).append(time.monotonic())
                    fut = async_request_server(server_rank, DistServer.fetch_one_sampled_message,
                                               self.producer_id_list[idx])
                    fut.add_done_callback(lambda f, idx=idx: self._deliver(f, idx))
                    self.num_request_list[idx] += 1

        def _sent_at(self) -> dict[int, collections.deque]:
            """Per server index, when each fetch still unanswered was sent (oldest first)."""
            return self.__dict__.setdefault("_graphstore_sent_at", {})

        def _deliver(self, fut: Any, idx: int) -> None:
            """RPC callback: the message and its end-of-epoch flag, or the failure."""
            sent = self._sent_at().get(idx)
            if sent:
                sent.popleft()
            try:
                msg, end_of_epoch = fut.wait()
            except Exception as exc:  # noqa: BLE001 (raised to the consumer by _next)
                self.queue.put((exc, False, idx))
                return
            self.queue.put((msg, end_of_epoch, idx))

        def _get(self) -> tuple[Any, bool, int]:
            """The next delivery; a wait past :data:`FETCH_REPORT_S` is logged once with the
            fetches still unanswered per server, and this process's stacks (its RPC threads)."""
            try:
                return self.queue.get(timeout=FETCH_REPORT_S)
            except queue.Empty:
                now = time.monotonic()
                pending = ", ".join(
                    f"storage rank {self.server_rank_list[i]} (producer {self.producer_id_list[i]}): "
                    f"{len(sent)}, oldest {now - sent[0]:.0f} s"
                    for i, sent in sorted(self._sent_at().items()) if sent)
                _log.warning("graph-store loader: no batch for %.0f s; fetches unanswered: %s; "
                             "this process's stacks follow", FETCH_REPORT_S, pending or "none")
                from graphstore.runtime import stack_dumps

                stack_dumps.dump_here()
            return self.queue.get()

        def _next(self) -> tuple[Any, bool, int]:
            msg, end_of_epoch, idx = self._get()
            self.num_received_list[idx] += 1
            if isinstance(msg, Exception):
                raise _storage_rpc_failure("fetching a sampled batch from",
                                           self.server_rank_list[idx],
                                           self.producer_id_list[idx], msg, "fetch") from msg
            return msg, end_of_epoch, idx

        def recv(self, **kwargs: Any) -> Any:
            if self.global_end_of_epoch:
                if self._all_received():
                    raise StopIteration
            else:
                self._request_some()
            msg, end_of_epoch, idx = self._next()
            while end_of_epoch:  # a server's end of epoch carries no message
                self.server_end_of_epoch[idx] = True
                if all(self.server_end_of_epoch):
                    self.global_end_of_epoch = True
                    if self._all_received():
                        raise StopIteration
                msg, end_of_epoch, idx = self._next()
            return msg

    return _as_module_level(FailFastReceivingChannel)


_BUILDERS = {"LabeledEdgeInput": _labeled_edge_input, "GltLoader": _glt_loader,
             "HardNegativeEdgeInput": _hard_negative_edge_input,
             "FailFastReceivingChannel": _fail_fast_receiving_channel}
_built: dict[str, type] = {}
_building = threading.RLock()
"""Held while a class is built: a storage session unpickles inputs on several RPC threads at once
(the compute ranks' producers start side by side), and two threads each building the class made
two distinct classes, one of which then failed to pickle ("not the same object as ...")."""


def __getattr__(name: str) -> type:
    """Build :class:`LabeledEdgeInput` / :class:`HardNegativeEdgeInput`
    / :class:`GltLoader` / :class:`FailFastReceivingChannel` once, on first use (imports GLT)."""
    if name not in _BUILDERS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _building:
        if name not in _built:
            check_glt_version()
            _built[name] = _BUILDERS[name]()
        return _built[name]


__all__ = [
    "FailFastReceivingChannel", "GLT_VERSION", "GltLoader", "HardNegativeEdgeInput",
    "LabeledEdgeInput", "check_glt_version", "default_store",
    "exit_on_failed_batch", "glt_version_problem", "init_dist_loader", "installed_glt_version",
    "prepare_sampling_server",
    "server_session_finished", "set_client_rpc_timeout", "set_no_node_labels",
]
