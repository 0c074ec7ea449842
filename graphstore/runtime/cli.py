"""Shared entrypoint plumbing: logging set-up and the error-to-exit-code mapping.

Every ``__main__`` calls :func:`run_cli` so that a user mistake prints one line and exits 2,
a runtime failure prints one line and exits 1, and only an unexpected bug prints a traceback.
"""

from __future__ import annotations

import logging
import sys
import warnings
from typing import Callable

from graphstore.runtime.errors import GraphstoreError


def setup_logging(role: str, level: int = logging.INFO) -> None:
    """Configure the root logger once, tagging every line with the process role; silence the
    deprecation warning torch 2.3 prints for every gloo group GLT creates (noise, not a fault)."""
    warnings.filterwarnings("ignore", message=r"You are using a Backend .* as a ProcessGroup")
    logging.basicConfig(
        level=level,
        format=f"%(asctime)s {role} %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
        force=True,
    )


def run_cli(main: Callable[[], int | None], prog: str) -> None:
    """Run ``main`` and exit with the code the error contract gives (see graphstore.runtime.errors)."""
    try:
        code = main() or 0
    except GraphstoreError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        code = exc.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        code = 130
    sys.exit(code)
