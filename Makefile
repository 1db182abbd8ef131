# Everything a fresh Debian machine with Python 3.11 needs is installed into .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-torch fuzz lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -n $${TEST_WORKERS:-2} tests

test-fast: $(STAMP)  # the inner loop: front end, passes, arch table, fuzz sample (no emulation), < 1 minute
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -n $${TEST_WORKERS:-2} -m "frontend or passes" tests

fuzz: $(STAMP)  # a larger run of the fuzzer than make test's sample (tests/fuzz.py)
	$(PY) tests/fuzz.py --count $${FUZZ_COUNT:-3000} --seed $${FUZZ_SEED:-1}

# tiledsl.torch's tests: installs torch (PyPI's wheel; for the CPU-only build pass
# TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu") and runs them.
test-torch: $(STAMP)
	$(PY) -m pip install --quiet $(TORCH_PIP_ARGS) torch
	$(PY) -m pytest -q tests/test_torch.py

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	$(PY) benchmarks/compile_time.py
	$(PY) benchmarks/emulator_speed.py
	$(PY) benchmarks/fmha_fwd.py

clean:
	rm -rf $(VENV) build *.egg-info
