"""The DGL peer row of benchmarks/sampling.py: importing DGL 2.1.0 on torch 2.3, and its sampler.

Runs only in the side environment ``.venv-dgl`` (benchmarks/dgl_env.sh; DGL cannot share the
project venv), as the ``dgl`` role of benchmarks/_sampling_modes.py; imports nothing at module
level beyond the standard library, so the driver (project venv) may import it for its names.

**The graphbolt workaround** (:func:`import_dgl`). DGL 2.1.0's wheel ships its graphbolt C++
library only for torch 2.0.0 - 2.2.1; ``dgl/graphbolt/__init__.py`` ends with
``load_graphbolt()``, which raises ``FileNotFoundError`` ("Cannot find DGL C++ graphbolt
library ... libgraphbolt_pytorch_2.3.0.so") for torch 2.3.0. ``import dgl`` reaches it through
its last line, ``from . import distributed`` (dgl.distributed imports graphbolt), so the whole
import fails although the core library (libdgl, which holds ``sample_neighbors`` and
``to_block``) has loaded fine. DGL has no environment variable to skip it (``DGLBACKEND``
chooses the backend, ``DGL_LIBRARY_PATH`` where libdgl is). So, without touching the installed
files, :func:`import_dgl` puts a ``sys.meta_path`` finder in front for the one module
``dgl.graphbolt``: it finds the real module as usual and wraps its loader so that, when the
module's code raises *that* error (a ``FileNotFoundError`` / ``ImportError`` naming graphbolt),
the error is kept as ``dgl.graphbolt.GRAPHBOLT_LOAD_ERROR`` instead of propagating. Since
``load_graphbolt()`` is the module's last statement, every Python name of dgl.graphbolt is
defined by then; only graphbolt's own C++ operators (``torch.ops.graphbolt``: the new
graphbolt sampler and its data pipes) are missing, and this benchmark uses none of them. Any
other error (a missing Python dependency, say) still propagates. The same holds for the
tensor adapter (DGL ships ``libtensoradapter_pytorch_*.so`` up to 2.2.1 too): DGL itself
tolerates its absence (it then allocates its arrays itself instead of through PyTorch's
allocator) and says so only at debug level; :func:`probe` reports it.

**The sampler** (:class:`DGLBlockLoader`): DGL's CPU sampling as a user writes it (what DGL's
``NeighborSampler`` + ``DataLoader`` do per batch, without their collation / worker machinery):
one ``dgl.graph`` over every edge (src -> dst), its CSC made up front (``create_formats_()``,
as DGL's DataLoader does; untimed like PyG's CSC conversion); per epoch a shuffled permutation
of every node in batches of 512; per batch, per hop from the seeds outwards,
``dgl.sampling.sample_neighbors(g, frontier, k, edge_dir="in")`` (k = 10 then 5, without
replacement) and ``dgl.to_block(sampled, frontier)``, the next frontier being the block's source
nodes; then the input nodes' features gathered (``x[input_nodes]``, as DGL's DataLoader does
for ``prefetch_node_feats``). The fan-out [10, 5] is by hop from the seeds, as PyG's
``num_neighbors`` (DGL's ``NeighborSampler`` lists it by layer from the input, i.e. [5, 10]).
Sampled edges of a batch: the edges of its blocks. A block's source nodes include its
destination nodes (``include_dst_in_src``), so hop 2 also samples the seeds again, which PyG
(it samples each node once) does not: DGL's edges per seed are higher by design.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import warnings
from typing import Any, Iterator

GRAPHBOLT_MODULE = "dgl.graphbolt"


def _graphbolt_library_error(error: BaseException) -> bool:
    """The error ``dgl.graphbolt``'s ``load_graphbolt()`` raises when its C++ library is missing
    or does not load (and no other)."""
    text = str(error)
    return (isinstance(error, FileNotFoundError) and "graphbolt library" in text) or \
        (type(error) is ImportError and "Graphbolt C++ library" in text)


class _TolerantLoader(importlib.abc.Loader):
    """The real loader of dgl.graphbolt, keeping its C++ library's load error (module docs)."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.GRAPHBOLT_LOAD_ERROR = None
        try:
            self.inner.exec_module(module)
        except (FileNotFoundError, ImportError) as error:
            if not _graphbolt_library_error(error):
                raise
            module.GRAPHBOLT_LOAD_ERROR = f"{type(error).__name__}: {error}"


class _GraphboltFinder(importlib.abc.MetaPathFinder):
    """Finds ``dgl.graphbolt`` where Python would, with :class:`_TolerantLoader` around its loader."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != GRAPHBOLT_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _TolerantLoader(spec.loader)
        return spec


def import_dgl() -> Any:
    """``import dgl`` with graphbolt's C++ library load failure tolerated (module docs). Also
    silences torchdata's deprecation banner for its datapipes (dgl.graphbolt imports them)."""
    if "dgl" in sys.modules:
        return sys.modules["dgl"]
    finder = _GraphboltFinder()
    sys.meta_path.insert(0, finder)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=UserWarning,
                                    message="(?s).*'datapipes', 'dataloader2' modules are deprecated")
            import dgl
    finally:
        sys.meta_path.remove(finder)
    return dgl


def probe() -> dict:
    """What the DGL row runs on: versions, whether the workaround was needed, DGL's threads."""
    import numpy
    import torch

    dgl = import_dgl()
    from dgl._ffi import base

    return {"python": sys.version.split()[0], "executable": sys.executable, "dgl": dgl.__version__,
            "torch": torch.__version__, "numpy": numpy.__version__,
            "graphbolt_load_error_tolerated": sys.modules[GRAPHBOLT_MODULE].GRAPHBOLT_LOAD_ERROR,
            "tensor_adapter_loaded": bool(base.is_tensor_adaptor_enabled()),
            "dgl_omp_threads": int(dgl.utils.get_num_threads())}


class DGLBatch:
    """One sampled batch: its blocks (input layer first), input nodes and their features."""

    __slots__ = ("blocks", "input_nodes", "x", "batch_size", "sampled_edges")

    def __init__(self, blocks: list, input_nodes: Any, x: Any, batch_size: int) -> None:
        self.blocks, self.input_nodes, self.x, self.batch_size = blocks, input_nodes, x, batch_size
        self.sampled_edges = sum(int(b.num_edges()) for b in blocks)


class DGLBlockLoader:
    """Per epoch, every node a seed once (shuffled), in batches; per batch
    ``sample_neighbors`` per hop + ``to_block`` + the input nodes' features (module docs)."""

    def __init__(self, src: Any, dst: Any, x: Any, num_nodes: int, fanout: list[int],
                 batch_size: int, seed: int = 0) -> None:
        import torch

        dgl = import_dgl()
        self.dgl, self.torch = dgl, torch
        self.g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=num_nodes)
        self.g.create_formats_()  # CSR / CSC / COO now, not in the first batch (as DGL's DataLoader)
        self.x = torch.from_numpy(x)
        self.fanout, self.batch_size = list(fanout), batch_size
        self.generator = torch.Generator().manual_seed(seed)
        dgl.seed(seed)

    def sample(self, seeds: Any) -> DGLBatch:
        dgl = self.dgl
        blocks, frontier = [], seeds
        for k in self.fanout:  # hop 1 (edges into the seeds) first
            sampled = dgl.sampling.sample_neighbors(self.g, frontier, k, edge_dir="in")
            block = dgl.to_block(sampled, frontier)
            frontier = block.srcdata[dgl.NID]
            blocks.insert(0, block)
        input_nodes = blocks[0].srcdata[dgl.NID]
        return DGLBatch(blocks, input_nodes, self.x[input_nodes], len(seeds))

    def __iter__(self) -> Iterator[DGLBatch]:
        order = self.torch.randperm(self.g.num_nodes(), generator=self.generator)
        for seeds in self.torch.split(order, self.batch_size):
            yield self.sample(seeds)
