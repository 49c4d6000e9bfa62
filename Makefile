# Two commands on a fresh machine: `make run` and `make test`. See README.md.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
AGENT_VENV := .venv-agent
PY := $(VENV)/bin/python
PORT ?= 8000
STORE_PORT ?= 8001
DATA_DIR ?= .data
STAMP := $(VENV)/.installed
AGENT_STAMP := $(AGENT_VENV)/.installed
# Bytecode is cached (__pycache__, ignored by git) even where the environment says not to:
# without it every pytest process rewrites every test module's asserts again (collection 16 s
# instead of 6 s per process, for each xdist worker) and every process a test starts compiles
# the project's sources again (docs/TESTING.md, "The inner loop").
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install core test-core run api-key test test-fast lint test-service test-agent test-deps reset create-table bench bench-peers soak clean \
	package deploy-aws deploy-localstack resources test-integration mutate agent-cli cluster cluster-restart

# Both virtualenvs hold the project itself as an editable install (pyproject.toml): chalicelib,
# edge, stacks, scripts, bench and tests import from any directory, and nothing changes sys.path.
$(STAMP): requirements.txt requirements-dev.txt requirements-vendor.txt edge/requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip<26.3"
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) -m pip install -q -e . --no-deps
	$(PY) scripts/vendor_lambda.py
	touch $@

$(AGENT_STAMP): agent/requirements.txt agent/requirements-dev.txt agent/pyproject.toml pyproject.toml
	$(PYTHON) -m venv $(AGENT_VENV)
	$(AGENT_VENV)/bin/python -m pip install -q --upgrade "pip<26.3"
	$(AGENT_VENV)/bin/python -m pip install -q -r agent/requirements.txt -r agent/requirements-dev.txt
	$(AGENT_VENV)/bin/python -m pip install -q -e . -e ./agent --no-deps
	touch $@

# The edge's compiled core (edge_core/: Rust, PyO3), built by maturin from crates.io into one
# wheel (edge_core/target/wheels/, which the edge image test installs too) and installed into
# .venv. Rebuilt when its sources change; cargo's cache in edge_core/target makes that quick.
# It links the system's OpenSSL (Debian's libssl-dev: scripts/install_build_deps.sh).
CORE_STAMP := $(VENV)/.core-installed
CORE_SOURCES := $(wildcard edge_core/src/*.rs) edge_core/Cargo.toml edge_core/Cargo.lock \
	edge_core/pyproject.toml edge_core/edge_core.pyi
$(CORE_STAMP): $(STAMP) $(CORE_SOURCES)
	sh scripts/install_build_deps.sh
	rm -rf edge_core/target/wheels
	CARGO_TARGET_DIR=$(CURDIR)/edge_core/target $(PY) -m pip wheel -q --no-deps ./edge_core \
	  -w edge_core/target/wheels
	$(PY) -m pip install -q --force-reinstall --no-deps edge_core/target/wheels/edge_core-*.whl
	touch $@

core: $(CORE_STAMP)

install: $(STAMP) $(CORE_STAMP) $(AGENT_STAMP) agent-cli

## agent-cli: the official agent CLI 2.x the edge tests run (npm registry, into tests/edge/cli/)
agent-cli:
	sh scripts/fetch_agent_cli.sh

## run: the stack on this machine: embedded store, the API on 127.0.0.1:$(PORT) and the edge
## (agents on 127.0.0.1:$$EDGE_AGENT_PORT, default 4443); data and the edge CA in $(DATA_DIR)/
run: $(STAMP) $(CORE_STAMP)
	PORT=$(PORT) STORE_PORT=$(STORE_PORT) DATA_DIR=$(DATA_DIR) \
	  API_METRICS_PORT=$${API_METRICS_PORT-0} EDGE_METRICS_PORT=$${EDGE_METRICS_PORT-0} \
	  exec $(PY) scripts/serve.py --edge

## cluster: N edge instances (default 3) behind HAProxy (TCP) beside the store and the API, on
## 127.0.0.1 (scripts/cluster.py, docs/CLUSTER.md); agents at :$(EDGE_AGENT_PORT), HTTP :$(EDGE_HTTP_PORT)
N ?= 3
EDGE_AGENT_PORT ?= 4443
EDGE_HTTP_PORT ?= 8080
EDGE_HTTPS_PORT ?= 8443
cluster: $(STAMP) $(CORE_STAMP)
	PORT=$(PORT) exec $(PY) scripts/cluster.py up -n $(N) --data-dir $(DATA_DIR)/cluster \
	  --api-port $(PORT) --agent-port $(EDGE_AGENT_PORT) --http-port $(EDGE_HTTP_PORT) \
	  --https-port $(EDGE_HTTPS_PORT)

## cluster-restart: restart the instances of `make cluster` one at a time (each drains first);
## INSTANCE=K restarts one
cluster-restart: $(STAMP)
	$(PY) scripts/cluster.py restart --data-dir $(DATA_DIR)/cluster $(if $(INSTANCE),--instance $(INSTANCE))

## api-key: a new account in the store of the running `make run` or `make cluster`; its admin
## API key is the last line (the store endpoint and secret come from the running one's store.env:
## $(DATA_DIR)/store.env or $(DATA_DIR)/cluster/stack/store.env, scripts/running_store.py)
api-key: $(STAMP)
	@if [ -z "$$DYNAMODB_ENDPOINT_URL" ]; then \
	  env_file=$$($(PY) scripts/running_store.py "$(DATA_DIR)/store.env" \
	    "$(DATA_DIR)/cluster/stack/store.env") || exit 1; \
	  set -a; . "$$env_file"; set +a; \
	fi; \
	AWS_DEFAULT_REGION=$${AWS_DEFAULT_REGION:-us-east-1} \
	$(PY) -m chalicelib.admin bootstrap --name "$${ACCOUNT_NAME:-api-key}"

## create-table: create the table in the configured store (idempotent)
create-table: $(STAMP)
	$(PY) -m chalicelib.admin create-table

## reset: forget everything `make run` stored
reset:
	rm -rf $(DATA_DIR)

## test: the whole suite (lint, service at every level, then the device agent)
test: lint test-core test-service test-agent

## test-fast: the inner loop of a change (lint, the unit tests, the functional tests in-process:
## no process started; the API's contract fuzz left to `make test`), under three minutes; the
## whole proof stays `make test` (docs/TESTING.md)
test-fast: $(STAMP) $(CORE_STAMP)
	$(MAKE) --no-print-directory lint
	$(PY) -m pytest -q -n 3 --in-process tests/unit tests/functional \
	  --ignore=tests/functional/test_fuzz.py

## lint: ruff (pyflakes rules, and the layout ruff format gives) over the repository, mypy
## over the shared core and the edge (pyproject.toml); rustfmt and clippy over edge_core/
lint: $(STAMP) $(CORE_STAMP)
	$(VENV)/bin/ruff check --no-cache .
	$(VENV)/bin/ruff format --check --no-cache .
	$(VENV)/bin/mypy chalicelib/core edge
	cd edge_core && cargo fmt --check
	cd edge_core && cargo clippy --quiet --all-features --all-targets -- -D warnings

## test-core: the compiled core's own tests (cargo test: real TLS clients against its listeners)
test-core:
	cd edge_core && cargo test --quiet

## test-service: every test of tests/, whole files shared out to TEST_WORKERS parallel workers,
## the longest files first (tests/conftest.py LONGEST_FIRST); prints the 20 slowest tests and
## leaves every test's time in test-output/service-junit.xml (docs/TESTING.md)
TEST_WORKERS ?= 3
test-service: $(STAMP) $(CORE_STAMP) $(AGENT_STAMP) test-deps agent-cli
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20 \
	  --junitxml=test-output/service-junit.xml tests

## test-deps: Debian packages the tests run as processes (Pebble, the ACME test CA), when
## missing, the official TypeScript API client and JavaScript agent SDK from npm, and the Go
## SDK's test agent (tests/edge/go/agent: golang.ngrok.com/ngrok/v2 pinned by go.mod/go.sum,
## from the Go module proxy; skipped with a note without Go) and the Go API client's
## (tests/functional/go_client/compat: github.com/ngrok/ngrok-api-go/v7) (built here, before the tests,
## so that parallel test workers never install or build them at once)
test-deps:
	sh scripts/install_test_deps.sh
	if [ ! -d tests/functional/ts_client/node_modules/@ngrok/ngrok-api ]; then \
	  cd tests/functional/ts_client && npm ci --no-audit --no-fund --silent; fi
	if [ ! -d tests/edge/node/node_modules/@ngrok/ngrok ]; then \
	  cd tests/edge/node && npm install --no-audit --no-fund --silent; fi
	if command -v go >/dev/null; then (cd tests/edge/go && go build -o agent .) && \
	  (cd tests/functional/go_client && go build -o compat .); \
	  else echo "go not installed: the Go SDK and Go API client tests will skip"; fi

## test-agent: the device agent against the real stack (serve.py + edge from .venv, the agent
## with the official SDK from .venv-agent)
test-agent: $(STAMP) $(CORE_STAMP) $(AGENT_STAMP)
	cd agent && SERVICE_PYTHON=../$(PY) ../$(AGENT_VENV)/bin/python -m pytest tests

## package: chalice package + the merge template of STAGE into build/$(STAGE) (sam.json, deployment.zip)
STAGE ?= prod
package: $(STAMP)
	AWS_DEFAULT_REGION=$${AWS_DEFAULT_REGION:-us-east-1} $(PY) scripts/deploy_stack.py package --stage $(STAGE) --out build/$(STAGE)

## resources: regenerate .chalice/resources-*.json and policy-*.json (after changing stages)
resources: $(STAMP)
	$(PY) scripts/deploy_stack.py resources

## deploy-aws STAGE=prod|dev: package, upload to S3 (DEPLOY_BUCKET or a per-account bucket),
## create/update the CloudFormation stack tunnel-service-$(STAGE), bootstrap a first account
deploy-aws: $(STAMP)
	@case "$(STAGE)" in prod|dev) ;; *) echo "STAGE must be prod or dev" >&2; exit 2;; esac
	$(PY) scripts/deploy_stack.py deploy --stage $(STAGE) $(if $(DEPLOY_BUCKET),--bucket $(DEPLOY_BUCKET))

## deploy-localstack: docker compose up LocalStack, deploy the localstack stage into it
deploy-localstack: $(STAMP)
	PYTHON=$(PY) scripts/deploy_localstack.sh

## test-integration: the HTTP suite; against a deployment with INTEGRATION_BASE_URL/_API_KEY
test-integration: $(STAMP)
	$(PY) -m pytest tests/integration

## mutate: mutation testing of the rule-bearing modules (mutmut; slow, not part of `make test`);
## prints killed / total per module and every surviving mutant. MUTATE='glob …' narrows it.
mutate: $(STAMP)
	nice -n 10 $(PY) tests/mutation/run.py

bench: $(STAMP)
	$(PY) bench/bench.py

## bench-peers: the edge + the Python SDK side by side with ssh -R, nginx and direct (docs/BENCHMARKS.md)
bench-peers: $(STAMP) $(CORE_STAMP) $(AGENT_STAMP)
	sh scripts/install_bench_deps.sh
	$(PY) -u bench/edge_bench/bench_peers.py $(BENCH_ARGS)

## soak: 10,000 writes against the make run stack: req/s, RSS per process, list page vs table size
soak: $(STAMP)
	$(PY) bench/soak_store.py

clean:
	rm -rf $(VENV) $(AGENT_VENV) .pytest_cache
