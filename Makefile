# Everything a fresh Debian machine with Python 3.11 needs is installed into .venv on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

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

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	$(PY) benchmarks/compile_time.py
	$(PY) benchmarks/emulator_speed.py
	$(PY) benchmarks/fmha_fwd.py

clean:
	rm -rf $(VENV) build *.egg-info
