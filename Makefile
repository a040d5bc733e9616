# tsformer: `make demo` and `make test` work from a fresh clone with nothing but Python 3.11.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH := torch==2.13.0# the CPU build; a bare `torch` pulls a multi-GB CUDA build

# Where a CSV given by bare file name (configs/etth1*.yaml) is found, for bench, runs and test;
# CI keeps the datasets in ../shared/data beside the clone. Override: make bench TSFORMER_DATA_DIR=/path/to/data
TSFORMER_DATA_DIR ?= ../shared/data
export TSFORMER_DATA_DIR

# Batch runs: make runs CONFIGS="configs/etth1.yaml configs/illness.yaml" HORIZONS="96 192"
CONFIGS ?= configs/etth1.yaml
HORIZONS ?= 96
RUN_FLAGS ?=

.PHONY: install demo test lint runs bench bench-m4 bench-electricity bench-single perf fuzz clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check $(TORCH)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

demo: install
	$(BIN)/tsformer train data/sample.csv --config configs/demo.yaml --target OT --out runs/demo --overwrite
	$(BIN)/tsformer evaluate runs/demo
	$(BIN)/tsformer predict runs/demo data/sample.csv --out runs/demo/forecast.csv --plot runs/demo/forecast.png
	$(BIN)/tsformer check runs/demo

test: install
	$(BIN)/pytest

lint: install
	$(BIN)/ruff check tsformer tests data
	$(BIN)/ruff format --check tsformer tests data

runs: install
	@twins=$$(for config in $(CONFIGS); do basename $$config .yaml; done | sort | uniq -d); \
	if [ -n "$$twins" ]; then echo "Error: configs share the name $$twins, so their runs/NAME_H folders would overwrite each other; rename one" >&2; exit 2; fi
	@for config in $(CONFIGS); do for h in $(HORIZONS); do \
	  name=$$(basename $$config .yaml)_$$h; \
	  $(BIN)/tsformer train --config $$config --horizon $$h --out runs/$$name --overwrite --quiet $(RUN_FLAGS) && \
	  $(BIN)/tsformer evaluate runs/$$name > runs/$$name/evaluate.txt && \
	  $(BIN)/tsformer check runs/$$name > runs/$$name/check.txt && \
	  echo "runs/$$name: $$(head -4 runs/$$name/evaluate.txt | tail -1)" || exit 1; \
	done; done

# ETTh1 at four horizons, one process each (so peak RSS is per horizon) -> benchmarks/results/etth1.md
BENCH_CONFIGS ?= configs/etth1_96.yaml configs/etth1_192.yaml configs/etth1_336.yaml configs/etth1_720.yaml
BENCH_FLAGS ?=
bench: install
	@for config in $(BENCH_CONFIGS); do $(BIN)/tsformer bench $$config $(BENCH_FLAGS) || exit 1; done

# M4 Hourly (414 series, long format): train on the train file, score the official test set -> benchmarks/results/m4_hourly.md
bench-m4: install
	$(BIN)/python benchmarks/m4_hourly.py $(BENCH_FLAGS)

# Day-ahead electricity prices, 4 markets, with and without covariates -> benchmarks/results/electricity.md
bench-electricity: install
	$(BIN)/python benchmarks/electricity.py $(BENCH_FLAGS)

# Ten real single series, last horizon hidden, against AutoETS / AutoTheta -> benchmarks/results/single_series.md;
# --earlier 3 also scores three earlier horizons of the visible rows, to judge a change without the hidden one.
# The peers (statsforecast, with statsmodels' bundled datasets) live in their own environment, outside `make test`.
PEERS := benchmarks/peers/.venv
$(PEERS)/.installed: benchmarks/peers/requirements.txt
	test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/pip install -q --disable-pip-version-check -r benchmarks/peers/requirements.txt
	touch $@

bench-single: install $(PEERS)/.installed
	$(PEERS)/bin/python benchmarks/peers/single_series.py --out runs/bench/single_data
	$(BIN)/python benchmarks/single_series.py --series runs/bench/single_data --earlier 3 $(BENCH_FLAGS)

# Thousands of random CSVs through the loader and the CLI (make test runs a few hundred).
fuzz: install
	TSFORMER_FUZZ_EXAMPLES=3000 $(BIN)/pytest tests/test_fuzz.py

# Large input: a 2,000,000-row CSV trains one epoch and predicts under 4 GiB peak RSS (~5 min);
# then 20,000 series x 500 steps in long format under 6 GiB.
perf: install
	$(BIN)/python benchmarks/large_input.py
	$(BIN)/python benchmarks/long_input.py

clean:
	rm -rf runs .pytest_cache .ruff_cache
