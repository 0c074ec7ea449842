# The two commands a fresh machine needs (see README):
#   make demo   set up .venv, generate the default dataset, and run the pipeline locally on it
#   make test   set up .venv and run the whole test suite
PY := .venv/bin/python
RUN_ROOT := runs

.PHONY: setup emulators demo test test-unit bench wheels
setup:
	@scripts/setup_venv.sh

# the GCS and BigQuery emulators the tests start, in their own environment (.venv-emulators)
emulators:
	@scripts/setup_emulators.sh

demo: setup
	$(PY) -m graphstore.datagen --size small --output .data/default --overwrite
	$(PY) -m pipeline run --task-config configs/task_hetero.yaml \
	    --resource-config configs/resource_local.yaml --run-root $(RUN_ROOT) --quiet-kfp

test: setup emulators
	$(PY) -m pytest -q --timeout=900 --durations=15

test-unit: setup
	$(PY) -m pytest -q tests/unit

bench: setup emulators
	$(PY) benchmarks/partition.py
	$(PY) benchmarks/sampling.py
	$(PY) benchmarks/export.py

wheels: setup
	scripts/build_wheels.sh .venv wheels
