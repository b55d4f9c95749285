#!/usr/bin/env bash
# Regenerates clients/go/gen from proto/keycap (and examples/payments/gen from the
# example sink's own proto) with the plugin versions pinned in
# clients/go/go.mod (`tool` directives) and the repo's buf (package-lock.json).
# Deterministic: same protos + same go.mod => byte-identical output.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

# Build the pinned plugins into clients/go/.bin (gitignored).
(cd "$here" && GOBIN="$here/.bin" go install tool)

cd "$root"
if [ ! -x node_modules/.bin/buf ]; then
  echo "generate.sh: node_modules/.bin/buf missing; run 'npm ci' (or 'make install') first" >&2
  exit 1
fi
# The client's contract only: effect, kernel, ledger, gateway (not proto/keycap/bench,
# a benchmark baseline that no Go client needs).
node_modules/.bin/buf generate --template clients/go/buf.gen.yaml \
  --path proto/keycap/effect --path proto/keycap/kernel --path proto/keycap/ledger --path proto/keycap/gateway --path proto/keycap/rules
# The example sink's own service (not in proto/: it is a user's, not keycap's).
node_modules/.bin/buf generate --template clients/go/buf.gen.example.yaml clients/go/examples/payments/proto
# The reason catalogue as package reasons (reasons_gen.go), by the plugin that writes
# the TypeScript one (tools/protoc-gen-keycap-valid; built here when missing), gofmt'd.
if [ ! -f tools/protoc-gen-keycap-valid/dist/main.js ]; then
  node_modules/.bin/tsc -p tools/protoc-gen-keycap-valid
fi
node_modules/.bin/buf generate --template clients/go/buf.gen.reasons.yaml --path proto/keycap/rules/v1/reasons.proto
gofmt -w clients/go/reasons/reasons_gen.go
