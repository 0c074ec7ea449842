# The two commands a fresh machine needs (see README):
#   make demo   set up .venv, generate the default dataset, and run the pipeline locally on it
#   make test   set up .venv and run the whole test suite
#   make image  build the container image (Containerfile) here with buildah; make image-test tests it
PY := .venv/bin/python
RUN_ROOT := runs
# extra `pipeline run` flags for the demo, e.g. DEMO_FLAGS='--set trainerConfig.trainerArgs.baselines=[popularity]'
# skips the BPR and LightGCN baselines
DEMO_FLAGS ?=

.PHONY: setup emulators browser demo test test-unit bench wheels image image-test
setup:
	@scripts/setup_venv.sh

# the GCS and BigQuery emulators the tests start, in their own environment (.venv-emulators)
emulators:
	@scripts/setup_emulators.sh

# headless Chromium from the Debian packages: the run report test opens report.html in it
browser:
	@scripts/setup_browser.sh

demo: setup
	$(PY) -m graphstore.tools.datagen --size small --output .data/default --overwrite
	$(PY) -m pipeline run --task-config configs/task_hetero.yaml \
	    --resource-config configs/resource_local.yaml --run-root $(RUN_ROOT) --quiet-kfp $(DEMO_FLAGS)

# TEST_WORKERS: pytest-xdist processes; --dist loadfile keeps each file's tests (and the cluster
# its module fixture starts) in one process
TEST_WORKERS ?= 2
test: setup emulators browser
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --timeout=900 --durations=25

test-unit: setup
	$(PY) -m pytest -q tests/unit

bench: setup emulators
	$(PY) benchmarks/partition.py
	$(PY) benchmarks/sampling.py
	$(PY) benchmarks/export.py

wheels: setup
	scripts/build_wheels.sh .venv wheels

# the container image every task runs (Containerfile), built with buildah; its layers, base and
# wheelhouse are cached under ~/.cache/graphstore-pipeline (scripts/image.sh)
image: setup
	@scripts/image.sh build

# the tests that run inside the image (pytest marker image): the doctor, the compiled pipeline's tasks
image-test: image
	$(PY) -m pytest -q -m image --require-image --timeout=1800 tests/image
