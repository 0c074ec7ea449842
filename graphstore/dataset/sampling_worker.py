"""Imported by the forkserver every graph-store sampling worker is forked from
(graphstore.runtime.processes.SAMPLING_PRELOAD): a batch that raises ends its worker, naming the
error, instead of being lost (graphstore.dataset.glt_adapter.exit_on_failed_batch), and the
worker's graphs are built without GLT's count of their distinct columns
(graphstore.dataset.glt_adapter.skip_column_count), and an ABLP batch between two node types is
sampled in one walk (graphstore.dataset.glt_adapter.one_pass_link_sampling); seed batches are cut
as tensor slices (graphstore.dataset.glt_adapter.slice_seed_batches) and feature rows gathered
with ``index_select`` (graphstore.dataset.glt_adapter.gather_feature_rows)."""

from graphstore.dataset import glt_adapter

glt_adapter.exit_on_failed_batch()
glt_adapter.skip_column_count()
glt_adapter.one_pass_link_sampling()
glt_adapter.slice_seed_batches()
glt_adapter.gather_feature_rows()
