# One command each on a fresh machine: the venv is created and the project installed when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SCENARIO ?= tour

.PHONY: lab test demo bench lint clean claude-code record

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

lab: $(STAMP)
	$(BIN)/jupyter lab $(ROOT_FLAG) notebooks/

test: $(STAMP)
	$(BIN)/python -m pytest -q tests
	$(BIN)/python -m pytest -q --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:randomly notebooks

demo: $(STAMP)
	$(BIN)/agentlab run $(SCENARIO) --tools demo

bench: $(STAMP)
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/scaling.py
	$(BIN)/python bench/notebooks.py

# The Claude Code CLI, project-local, one folder per version (tool/claude-code/<version>); the records in
# data/observed/claude-code/ are of these versions
CLAUDE_CODE_VERSION ?= 2.1.197
CLAUDE_CODE_VERSIONS ?= 2.1.197 2.1.332
claude-code:
	npm install --silent --no-audit --no-fund --prefix tool/claude-code/$(CLAUDE_CODE_VERSION) @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION)

# The other agent frameworks that are observed (the `clients` extra), in their own venv: never in .venv
CLIENTS_VENV  := .venv-clients
CLIENTS_STAMP := $(CLIENTS_VENV)/.installed
$(CLIENTS_STAMP): pyproject.toml
	$(PYTHON) -m venv $(CLIENTS_VENV)
	$(CLIENTS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CLIENTS_VENV)/bin/python -m pip install --quiet -e '.[clients]'
	touch $(CLIENTS_STAMP)

# Re-record every client on every scenario and compare with the committed records (exit 1 on a difference).
# `make record UPDATE=1` writes the new records into data/observed instead. A client that cannot be
# installed here is skipped with the reason.
RECORD_CLIENTS ?= agentlab tool-runner $(addprefix claude-code@,$(CLAUDE_CODE_VERSIONS)) pydantic-ai langchain
record: $(STAMP)
	@for v in $(CLAUDE_CODE_VERSIONS); do \
	  [ -x tool/claude-code/$$v/node_modules/.bin/claude ] || $(MAKE) --no-print-directory claude-code CLAUDE_CODE_VERSION=$$v \
	    || echo "make record: npm could not install Claude Code $$v"; \
	done
	@$(MAKE) --no-print-directory $(CLIENTS_STAMP) || echo "make record: could not install the clients extra into $(CLIENTS_VENV)"
	@py=$(BIN)/python; if [ -f $(CLIENTS_STAMP) ]; then py=$(CLIENTS_VENV)/bin/python; fi; status=0; \
	for client in $(RECORD_CLIENTS); do \
	  echo "== $$client"; \
	  $$py -m agentlab observe $$client --skip-missing $(if $(UPDATE),,--check) || status=1; \
	done; exit $$status

lint: $(STAMP)
	$(BIN)/ruff check agentlab tests bench

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
