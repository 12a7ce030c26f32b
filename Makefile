# Two commands for a newcomer: `make run` and `make test`. Both set everything up from nothing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test setup setup-test driver clean
# What `make test` runs a second time on Dawn (see test:)
DAWN_TESTS ?= tests/runtime tests/tensor tests/nn tests/autograd tests/optim tests/ops/test_row_kernels.py tests/ops/test_fusion.py tests/ops/test_causal_softmax.py tests/ops/test_nd_strided_vec.py tests/ops/test_cast_vec.py tests/ops/test_sum_rows_vec.py

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# the core and matplotlib (the extra `plot`), so `make run` writes loss.png
$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e '.[plot]'
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install -q -e '.[test,all]'
	touch $@

setup: $(VENV)/.installed driver
setup-test: $(VENV)/.installed-test driver

# Install Mesa's software Vulkan driver when wgpu (or Dawn, where wgpudawn is installed) finds no
# adapter (root only; otherwise say how). Dawn needs a newer lavapipe than Debian 12's Mesa 22.3:
# on bookworm it comes from bookworm-backports (Mesa 25).
driver: $(VENV)/.installed
	@{ $(BIN)/python -m anygpu.runtime.probe && $(BIN)/python -m anygpu.runtime.probe --dawn; } || { \
	  if [ "$$(id -u)" = "0" ]; then \
	    echo "anygpu: no usable GPU adapter found; installing Mesa's software Vulkan driver (mesa-vulkan-drivers)"; \
	    if grep -qs '^VERSION_CODENAME=bookworm' /etc/os-release; then \
	      echo 'deb http://deb.debian.org/debian bookworm-backports main' > /etc/apt/sources.list.d/backports.list; \
	      target="-t bookworm-backports"; \
	    fi; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$target mesa-vulkan-drivers >/dev/null && \
	    $(BIN)/python -m anygpu.runtime.probe && $(BIN)/python -m anygpu.runtime.probe --dawn; \
	  else \
	    echo "anygpu: no usable GPU adapter found. Install a Vulkan driver, e.g.: sudo apt-get install -y mesa-vulkan-drivers" \
	         "(on Debian 12, for Dawn: from bookworm-backports, apt-get install -t bookworm-backports mesa-vulkan-drivers)"; exit 1; \
	  fi; }

run: setup
	$(BIN)/anygpu info
	$(BIN)/anygpu train digits

# Lint (ruff) and type check (mypy, at the level set in pyproject.toml), then the suite on both
# cores with line coverage of src/ (files at 100% are not listed).
SERIAL_TESTS = tests/runtime/test_compile_shapes.py

test: setup-test
	$(BIN)/ruff check src tests
	$(BIN)/mypy src/anygpu
	@# The capture tests (the slowest file) run on their own, after the rest; they compare eager runs
	@# with their replays bit for bit (docs/NOTES.md, "Capture comparisons under xdist").
	$(BIN)/python -m pytest -q -n 2 --cov=anygpu --cov-report= --ignore=$(SERIAL_TESTS) tests
	$(BIN)/python -m pytest -q -p no:xdist --cov=anygpu --cov-append --cov-report=term:skip-covered $(SERIAL_TESTS)
	@# Then a part of it again on Dawn (its compiler, Tint, is stricter than naga), where wgpudawn is
	@# installed: the whole suite twice would take CI past 12 minutes. `ANYGPU_RUNTIME=dawn make test`
	@# runs everything on Dawn.
	@if $(BIN)/python -c "import wgpudawn" 2>/dev/null && [ "$$ANYGPU_RUNTIME" != dawn ]; then \
	  echo "anygpu: again on Dawn: $(DAWN_TESTS)"; \
	  ANYGPU_RUNTIME=dawn $(BIN)/python -m pytest -q -n 2 -p no:cacheprovider --ignore=$(SERIAL_TESTS) $(DAWN_TESTS) && \
	  ANYGPU_RUNTIME=dawn $(BIN)/python -m pytest -q -p no:xdist -p no:cacheprovider $(SERIAL_TESTS); \
	fi

clean:
	rm -rf $(VENV) runs .pytest_cache
