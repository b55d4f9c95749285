# keycap — the two commands that matter: `make run` and `make test`.
# Everything is installed from the project's own files (package-lock.json,
# tools/ferretdb/go.mod); nothing needs installing by hand.

SHELL := /bin/bash
NPM_STAMP := node_modules/.keycap-installed
CLI := node dist/services/cli/src/main.js
# buf breaking compares the protos with this git ref (override for branches/PRs).
BREAKING_AGAINST ?= .git\#branch=main

.PHONY: all format install generate generate-ts build lint breaking test test-db test-ts test-ts-pg torture torture-short test-go test-python run bench bench-volume ferretdb clean

all: build

$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $@

install: $(NPM_STAMP)

## generate: every language's stubs from proto/ (TypeScript + descriptor set; Go and Python, committed,
## with the reason catalogue as clients/go/reasons and keycap_client.reasons)
generate: generate-ts
	clients/go/generate.sh
	bash clients/python/generate.sh

# generate-ts and build are file-based: an unchanged tree (make run after make run) skips
# both; a changed .proto regenerates and recompiles, a changed .ts only recompiles.
GEN_INPUTS := buf.yaml buf.gen.yaml clients/ts/buf.gen.yaml tools/protoc-gen-keycap-valid/tsconfig.json \
  $(shell find proto third_party/proto tools/protoc-gen-keycap-valid/src -type f 2>/dev/null)
GEN_STAMP := gen/.keycap-generated
TS_INPUTS := tsconfig.json $(shell find services clients/ts test bench \
  \( -path clients/ts/gen -o -path clients/ts/dist -o -path test/compile-fail -o -path test/results -o -name node_modules \) -prune \
  -o -type f \( -name '*.ts' -o -name '*.json' \) -print 2>/dev/null)
BUILD_STAMP := dist/.keycap-built

$(GEN_STAMP): $(NPM_STAMP) $(GEN_INPUTS)
	@echo "make: generating code from proto/ (buf + ts-proto; about 30 s on 2 cores)"
	npm run --silent generate
	@touch $@

generate-ts: $(GEN_STAMP)

$(BUILD_STAMP): $(GEN_STAMP) $(TS_INPUTS)
	@echo "make: compiling TypeScript (tsc; about 25 s on 2 cores)"
	npx tsc -p tsconfig.json
	@mkdir -p dist && touch $@

build: $(BUILD_STAMP)

## format: rewrite the TypeScript sources in the project's style (prettier; make lint checks it)
format: $(NPM_STAMP)
	npx prettier --write .

## lint: buf lint (STANDARD), buf breaking against main, import boundaries, formatting, strict type check
lint: $(NPM_STAMP)
	npx buf lint
	npx depcruise --config .dependency-cruiser.cjs services clients/ts
	npx prettier --check .
	$(MAKE) --no-print-directory breaking
	npx tsc -p tsconfig.json --noEmit

breaking: $(NPM_STAMP)
	@if git rev-parse --verify -q main >/dev/null && git cat-file -e main:proto 2>/dev/null; then \
	  echo "buf breaking against $(BREAKING_AGAINST)"; npx buf breaking --against '$(BREAKING_AGAINST)'; \
	else echo "buf breaking: no proto/ on main yet; nothing to compare"; fi

## ferretdb: build the FerretDB wrapper used when no mongod can be had (cached)
ferretdb: build
	node -e 'require("./dist/services/common/src/embedded-mongo").ensureFerretdb(require("./dist/services/common/src/logger").createLogger("make","info")).then(p=>console.log(p))'

## test-db: build/install the embedded MongoDB-protocol server the next step will use (FerretDB;
## PostgreSQL for KEYCAP_EMBEDDED_MONGO=ferretdb-pg) as a step of its own, before anything timed
test-db: build
	@node -e 'require("./dist/services/common/src/embedded-mongo").prepareEmbeddedMongo(require("./dist/services/common/src/logger").createLogger("make","info","pretty")).then(p=>console.log("make: database ready: "+p),e=>{console.error("make: "+e.message);process.exit(1)})'

## test: set up and run every test against a real MongoDB-protocol server
## (the TypeScript suite on both embedded backends: FerretDB on SQLite and on PostgreSQL)
test: build lint
	$(MAKE) --no-print-directory test-ts
	$(MAKE) --no-print-directory test-ts-pg
	$(MAKE) --no-print-directory test-go
	$(MAKE) --no-print-directory test-python

test-ts: build
	$(MAKE) --no-print-directory test-db
	npx mocha

## test-ts-pg: the TypeScript suite on FerretDB backed by PostgreSQL (installed from Debian's packages on first use)
test-ts-pg: build
	KEYCAP_EMBEDDED_MONGO=ferretdb-pg $(MAKE) --no-print-directory test-db
	KEYCAP_EMBEDDED_MONGO=ferretdb-pg npx mocha

## test-python: Python client (stubs drift check, e2e against real services with pytest)
test-python: build
	bash clients/python/generate.sh
	@out="$$(git status --porcelain --untracked-files=all -- clients/python/src/keycap_client/_gen clients/python/src/keycap_client/reasons.py)"; \
	  if [ -n "$$out" ]; then echo "$$out"; echo "Python stubs out of date: run make generate and commit"; exit 1; fi
	bash clients/python/test.sh

## test-go: Go client (stubs drift check, vet, e2e against real services, grpcurl + grpc-health-probe)
test-go: build
	clients/go/test.sh

## run: start kernel, ledger, ledger-admin and the web console in the foreground (Ctrl-C stops all),
## with Prometheus metrics on 127.0.0.1:9464 unless KEYCAP_METRICS_LISTEN says otherwise (empty: off)
run: build
	KEYCAP_CONSOLE_LISTEN=$${KEYCAP_CONSOLE_LISTEN:-127.0.0.1:50054} KEYCAP_GATEWAY_LISTEN=$${KEYCAP_GATEWAY_LISTEN:-127.0.0.1:50055} KEYCAP_METRICS_LISTEN="$${KEYCAP_METRICS_LISTEN-127.0.0.1:9464}" $(CLI) serve all

## torture: the kill-anything torture test, long version (>= 1,000 kills on each embedded backend); report in test/results/
torture: build
	node dist/test/torture/main.js --kills $${TORTURE_KILLS:-1000} --backend $${TORTURE_BACKEND:-both} $(if $(SEED),--seed $(SEED),)

## torture-short: the seeded 40-kill pass make test runs (test/it_torture.spec.ts), alone
torture-short: build
	node dist/test/torture/main.js --kills 40 --backend $${TORTURE_BACKEND:-ferretdb-sqlite} --seed $${SEED:-20261203}

## bench: benchmarks on FerretDB backed by PostgreSQL unless KEYCAP_EMBEDDED_MONGO says otherwise,
## then the MCP gateway scenario (tools/call through keycap mcp vs straight to the upstream, bench/mcp-gateway.ts)
## (the peer scenario's Redis is Debian's redis-server, installed with apt-get on first use, like PostgreSQL)
bench: build
	KEYCAP_EMBEDDED_MONGO=$${KEYCAP_EMBEDDED_MONGO:-ferretdb-pg} node dist/bench/run.js $(if $(QUICK),--quick,)
	KEYCAP_EMBEDDED_MONGO=$${KEYCAP_EMBEDDED_MONGO:-ferretdb-pg} node dist/bench/mcp-gateway.js $(if $(QUICK),--calls 100,)

## bench-volume: operator reads and the whole call on a database preloaded with RECORDS (default 1,000,000)
## effects, completed calls and refusals (issue 32); FerretDB on PostgreSQL unless KEYCAP_EMBEDDED_MONGO says otherwise
bench-volume: build
	KEYCAP_EMBEDDED_MONGO=$${KEYCAP_EMBEDDED_MONGO:-ferretdb-pg} node dist/bench/volume.js --records $${RECORDS:-1000000}

clean:
	rm -rf dist gen
