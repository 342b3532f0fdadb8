# globelog: `make demo` runs the demo on a local multi-region cluster; `make test` runs every test.
# Both run scripts/setup.sh first, which installs what is missing (idempotent).

VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup demo test lint typecheck unit integration proto clean

setup:
	@scripts/setup.sh

demo: setup
	@$(PY) -m demo

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: setup
	$(VENV)/bin/mypy

test: setup lint typecheck
	$(PY) -m pytest -n 2 --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)

unit: setup
	$(PY) -m pytest -m "unit or scenario or simulation" $(PYTEST_ARGS)

integration: setup
	$(PY) -m pytest -m "integration or e2e" $(PYTEST_ARGS)

# Regenerates ledger/codecs/proto/bookkeeper_pb2.py(i) from bookkeeper.proto (committed; a unit
# test checks they are current).
proto: setup
	cd ledger/codecs/proto && PATH="$(CURDIR)/$(VENV)/bin:$$PATH" "$(CURDIR)/$(PY)" -m grpc_tools.protoc \
		-I. --python_out=. --mypy_out=. bookkeeper.proto

clean:
	rm -rf .cluster .cluster-demo .pytest_cache .mypy_cache .ruff_cache
