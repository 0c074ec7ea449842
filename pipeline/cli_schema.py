"""``python -m pipeline schema``: the JSON Schema of a config file, for editors.

    python -m pipeline schema [--kind task|resource] [--output FILE]   # the JSON Schema
    python -m pipeline schema --markdown [--output FILE]               # docs/configs.md
    python -m pipeline schema --update-docs                            # rewrite the committed copies

Both come from the config models (graphstore.config); ``--update-docs`` rewrites every file of
``graphstore.config.docs.GENERATED`` in this repository (a test fails while one is stale). Writing a
file that cannot be written is exit 2 naming it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from graphstore.runtime.errors import UsageError

REPO = Path(__file__).resolve().parents[1]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", choices=("task", "resource"), default="task",
                        help="which config file's schema (default: task)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--markdown", action="store_true",
                      help="print the config reference (docs/configs.md) instead of a schema")
    what.add_argument("--update-docs", action="store_true",
                      help="rewrite docs/configs.md and docs/schema/*.schema.json in this repository")
    parser.add_argument("--output", metavar="FILE", help="write to FILE instead of stdout")


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    from graphstore.config import docs

    if args.update_docs:
        if args.output:
            raise UsageError("--update-docs writes the repository's files; leave out --output")
        for rel, text in docs.generated_files(REPO).items():
            _write(REPO / rel, text)
            print(f"schema: wrote {rel}")
        return 0
    if args.markdown:
        text = docs.reference_markdown((REPO / docs.TEMPLATE).read_text(encoding="utf-8"))
    else:
        text = docs.json_schema_text(args.kind)
    if args.output:
        _write(Path(args.output), text)
    else:
        sys.stdout.write(text)
    return 0
