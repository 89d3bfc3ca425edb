# One command each on a fresh machine: the venv is created and the project installed when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SCENARIO ?= tour

.PHONY: lab test demo bench lint clean claude-code

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

# `agentlab run` exits 1 when the run ends with an error result (error_max_output_tokens, error_refusal, ...):
# for a demo that is the scenario's ending, explained on the last line, and the target succeeds. Bad usage or
# bad input (exit 2) still fails the target.
demo: $(STAMP)
	@$(BIN)/agentlab run $(SCENARIO) --tools demo; status=$$?; \
	if [ $$status -eq 1 ]; then \
	  echo "make demo: exit status 1 means the run ended with an error result (above): the ending the '$(SCENARIO)' scenario is built to show. 0 means success, 2 bad usage or input."; \
	elif [ $$status -ne 0 ]; then \
	  echo "make demo: agentlab exited with status $$status: it could not run '$(SCENARIO)' (see the message above; \`$(BIN)/agentlab scenarios\` lists the scenarios)." >&2; \
	  exit $$status; \
	fi

bench: $(STAMP)
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/scaling.py
	$(BIN)/python bench/notebooks.py

# The Claude Code CLI, project-local, at the version whose behaviour is recorded in data/observed/
CLAUDE_CODE_VERSION ?= 2.1.197
claude-code:
	npm install --silent --no-audit --no-fund --prefix tool/claude-code @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION)

lint: $(STAMP)
	$(BIN)/ruff check agentlab tests bench

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
