# One command each on a fresh machine: the venv is created and the project installed when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
SCENARIO ?= tour

.PHONY: lab lessons test test-times site site-test demo bench bench-docs lint clean claude-code node-clients grade grade-docs record tool-runner-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# the workbench and agentlab-grade (agentlab-grade/, a member of the workspace: the pytest plugin, the heatmap), editable
$(STAMP): $(BIN)/python pyproject.toml agentlab-grade/pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[lab,test,site]' -e './agentlab-grade[heatmap]'
	touch $(STAMP)

LAB_ARGS ?=
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

# You answer the exercises in your own copy of the lessons, my-lessons/ (git ignores it). Each `make lab` first takes
# in the lessons of notebooks/ (new ones after a git pull), keeping every cell you changed (agentlab/exercises/workspace.py)
LESSONS ?= my-lessons
lab: lessons
	$(BIN)/jupyter lab $(ROOT_FLAG) $(LAB_ARGS) $(LESSONS)/

lessons: $(STAMP)
	$(BIN)/python -m agentlab.exercises.workspace --source notebooks --work $(LESSONS)

# The tests and the lessons (nbval) in one run on three workers for two cores: some tests wait (on a
# subprocess, a kernel, a timeout that is the point of the test, Chromium) and the third worker uses the core
# meanwhile. A file's tests stay on one worker, so module fixtures (the built wheel, the JupyterLab of the
# browser test) are set up once. Files are handed out longest first (tests/file_order.py), from the times of the
# last run or tests/file_seconds.json (`make test-times` rewrites it). bench/make_test.py times it.
# The site tests: make site-test.
# notebooks/zh (the lessons in Chinese) is not run by nbval: its code cells and outputs are the English ones,
# byte for byte (tests/test_zh_lessons.py), so it would pass or fail exactly as they do, for 15 more kernels.
# Bytecode is cached in .pytest_cache/pycache even where PYTHONDONTWRITEBYTECODE is set (some CI images and
# containers set it): otherwise every worker re-does pytest's assertion rewriting of the test modules and of the
# plugins' packages (hypothesis, anyio) on each run. Nothing is written into the source tree or the venv.
WORKERS ?= 3
PYCACHE ?= $(CURDIR)/.pytest_cache/pycache
# The lessons' kernels are forks of one process per worker that imported the SDK (tests/preloaded_kernel.py).
test: $(STAMP)
	PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(PYCACHE) $(BIN)/python -m pytest tests notebooks -q -n $(WORKERS) --dist loadfile --no-loadscope-reorder -m "not site" -p no:randomly -p tests.pytest_gc \
		-p tests.preloaded_kernel --nbval --nbval-kernel-name agentlab-preloaded --nbval-sanitize-with tests/nbval_sanitize.cfg --ignore=tests/browser_stepper.ipynb --ignore=notebooks/zh

# tests/file_seconds.json, the order of a first run (a fresh clone has no pytest cache), from the last run's times
test-times:
	$(BIN)/python tests/file_order.py

# The lessons as a static website in build/site (open build/site/index.html)
site: $(STAMP)
	$(BIN)/python website/build.py --out build/site

# Builds the site and reads its pages in Chromium (kept out of make test for time; CI runs both)
site-test: $(STAMP)
	$(BIN)/python -m pytest -q -m site tests/test_site.py

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
	$(BIN)/python bench/compaction.py
	$(BIN)/python bench/notebooks.py
	$(BIN)/python bench/grade.py
	$(BIN)/python bench/render.py

# The figures in README.md and docs/benchmarks.md, written again from bench/results/*.json
bench-docs: $(STAMP)
	$(BIN)/python bench/render.py

# Every gradeable scenario: agentlab's CLI passes every rule, the tutorial loop fails (exit 1 expected), then
# the committed records and the tutorial loop side by side in docs/images/grade_heatmap.png
GRADE_DIR ?= build/grade
grade: $(STAMP)
	mkdir -p $(GRADE_DIR)
	$(BIN)/agentlab grade --command "$(BIN)/agentlab run --tools demo --web-search --prompt" --label "agentlab run --tools demo --web-search" \
		--save $(GRADE_DIR)/agentlab-cli.json
	$(BIN)/agentlab grade --command "$(BIN)/python examples/naive_loop.py" --label "naive loop (examples/)" \
		--save $(GRADE_DIR)/naive-loop.json; test $$? -eq 1
	$(BIN)/agentlab grade --observed --load $(GRADE_DIR)/naive-loop.json \
		--heatmap docs/images/grade_heatmap.png > $(GRADE_DIR)/combined.txt; test $$? -le 1
	@echo "make grade: agentlab passes, the naive loop fails; heatmap in docs/images/grade_heatmap.png"

# docs/grade.md's sample reports, written again from what `agentlab grade` prints for the committed records
# (tests/test_grade_docs.py fails when they are out of date)
grade-docs: $(STAMP)
	$(BIN)/python tests/test_grade_docs.py

# The Claude Code CLI, project-local, one folder per version (tool/claude-code/<version>); the records in
# data/observed/claude-code/ are of these versions
CLAUDE_CODE_VERSION ?= 2.1.197
CLAUDE_CODE_VERSIONS ?= 2.1.197 2.1.332
claude-code:
	npm install --silent --no-audit --no-fund --prefix tool/claude-code/$(CLAUDE_CODE_VERSION) @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION)

# The TypeScript agent loops that are observed (the Vercel AI SDK, the Anthropic TypeScript SDK's tool runner), at
# the exact versions of clients/node/package-lock.json, in tool/node-clients (ignored by git), with the agent
# scripts of clients/node beside them
NODE_CLIENTS := tool/node-clients
node-clients:
	mkdir -p $(NODE_CLIENTS)
	cp clients/node/package.json clients/node/package-lock.json clients/node/*.mjs $(NODE_CLIENTS)/
	npm ci --silent --no-audit --no-fund --prefix $(NODE_CLIENTS)

# The other agent frameworks that are observed (the `clients` extra), in their own venv: never in .venv
CLIENTS_VENV  := .venv-clients
CLIENTS_STAMP := $(CLIENTS_VENV)/.installed
# at the versions the committed records are of (a new release upstream would otherwise look like drift)
CLIENTS_PINS  := data/observed/clients-constraints.txt
$(CLIENTS_STAMP): pyproject.toml $(CLIENTS_PINS)
	$(PYTHON) -m venv $(CLIENTS_VENV)
	$(CLIENTS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CLIENTS_VENV)/bin/python -m pip install --quiet -e '.[clients]' -c $(CLIENTS_PINS)
	touch $(CLIENTS_STAMP)

# The anthropic SDK's beta tool runner is recorded at the newest release the range in pyproject.toml admits (the
# clients' venv pins the SDK at the frameworks' version): its own venv, the SDK upgraded within that range on every
# `make record`, so a new release shows up as a version without records until `make record UPDATE=1` writes them
RUNNER_VENV    := .venv-tool-runner
ANTHROPIC_SPEC := $(shell sed -n 's/^ *"\(anthropic[<>=!~][^"]*\)",*$$/\1/p' pyproject.toml)
tool-runner-venv:
	@[ -x $(RUNNER_VENV)/bin/python ] || { $(PYTHON) -m venv $(RUNNER_VENV) && $(RUNNER_VENV)/bin/python -m pip install --quiet --upgrade pip; }
	@[ -f $(RUNNER_VENV)/.installed ] || { $(RUNNER_VENV)/bin/python -m pip install --quiet -e . && touch $(RUNNER_VENV)/.installed; }
	$(RUNNER_VENV)/bin/python -m pip install --quiet --upgrade '$(ANTHROPIC_SPEC)'

# Re-record every client on every scenario and compare with the committed records (exit 1 on a difference).
# `make record UPDATE=1` writes the new records into data/observed instead. Then each installed Claude Code
# runs the session scenarios again and its transcripts (~/.claude/projects) are parsed: anything `agentlab
# replay` does not understand fails the target (a format change); UPDATE=1 writes them into data/sessions. A client that cannot be
# installed here is skipped with the reason.
RECORD_CLIENTS ?= agentlab tool-runner $(addprefix claude-code@,$(CLAUDE_CODE_VERSIONS)) pydantic-ai langchain \
	vercel-ai anthropic-ts openai-agents strands
record: $(STAMP)
	@for v in $(CLAUDE_CODE_VERSIONS); do \
	  [ -x tool/claude-code/$$v/node_modules/.bin/claude ] || $(MAKE) --no-print-directory claude-code CLAUDE_CODE_VERSION=$$v \
	    || echo "make record: npm could not install Claude Code $$v"; \
	done
	@cmp -s clients/node/package-lock.json $(NODE_CLIENTS)/package-lock.json || $(MAKE) --no-print-directory node-clients \
	  || echo "make record: npm could not install the Node clients (clients/node) into $(NODE_CLIENTS)"
	@$(MAKE) --no-print-directory $(CLIENTS_STAMP) || echo "make record: could not install the clients extra into $(CLIENTS_VENV)"
	@$(MAKE) --no-print-directory tool-runner-venv || echo "make record: could not install the newest '$(ANTHROPIC_SPEC)' into $(RUNNER_VENV)"
	@py=$(BIN)/python; if [ -f $(CLIENTS_STAMP) ]; then py=$(CLIENTS_VENV)/bin/python; fi; failed=""; logs=$$(mktemp -d); \
	for client in $(RECORD_CLIENTS); do \
	  echo "== $$client"; run=$$py; \
	  if [ $$client = tool-runner ] && [ -f $(RUNNER_VENV)/.installed ]; then run=$(RUNNER_VENV)/bin/python; fi; \
	  $$run -m agentlab observe $$client --skip-missing $(if $(UPDATE),,--check) >$$logs/$$client.log 2>&1; rc=$$?; \
	  cat $$logs/$$client.log; [ $$rc -eq 0 ] || failed="$$failed $$client"; \
	done; \
	if [ -n "$$failed" ]; then \
	  echo "make record: these clients did not reproduce their committed records:$$failed"; \
	  for client in $$failed; do grep -E '^DRIFT|^Traceback|^[A-Za-z_.]*(Error|Exception):' $$logs/$$client.log | sed "s/^/  $$client: /" | head -20; done; \
	  rm -rf $$logs; exit 1; \
	fi; rm -rf $$logs; echo "make record: every client reproduces its committed records"
	@echo "== Claude Code session transcripts"
	@$(BIN)/agentlab sessions --record $(if $(UPDATE),--update,) || { \
	  echo "make record: a Claude Code transcript holds something agentlab replay does not understand (above)"; exit 1; }

lint: $(STAMP)
	$(BIN)/ruff check agentlab agentlab-grade tests bench website translations examples

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
