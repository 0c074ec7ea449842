"""GLT's sampling workers start from a preloaded forkserver (graphstore.runtime.processes, installed by
graphstore.dataset.glt_adapter.prepare_sampling_server)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# a worker started the way GLT starts one (get_context('spawn').Process) reports its parent:
# the forkserver, not this process, and it finds GLT already imported
