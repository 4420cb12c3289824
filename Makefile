# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed

.PHONY: run test fault bench install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/laneledger up --demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The fault suite's long form (tests/fault/; `make test` runs its short form).
fault: $(STAMP)
	LANELEDGER_FAULT_LONG=1 $(BIN)/python -m pytest -q -s tests/fault

bench: $(STAMP)
	$(BIN)/python bench/report.py

clean:
	rm -rf $(VENV) .laneledger .pytest_cache
