#!/usr/bin/env bash
# The Go client's checks, as CI runs them (from any directory):
#   1. go.mod/go.sum tidy, and the committed stubs in gen/ (and the example
#      sink's in examples/payments/gen/) match a fresh
#      ./generate.sh (pinned plugins, the repo's buf) byte for byte;
#   2. go build + go vet;
#   3. go test: end-to-end against a real stack (node dist/test/support/e2e-stack.js)
#      and the stock-tool acceptance (pinned grpcurl and grpc-health-probe).
# Needs Go, the module proxy, and the repo's npm install + TypeScript build
# (`make build`). Exits non-zero on the first failure.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$here"

for need in "$root/node_modules/.bin/buf" "$root/dist/test/support/e2e-stack.js"; do
  if [ ! -e "$need" ]; then
    echo "clients/go/test.sh: $need missing; run 'make build' from the repo root first" >&2
    exit 1
  fi
done

echo "== go mod tidy -diff"
go mod tidy -diff

echo "== generate (drift check)"
snapshot="$(mktemp -d)"
trap 'rm -rf "$snapshot"' EXIT
# keycap's stubs, the example sink's own (examples/payments/gen), and the reason catalogue (reasons).
stubs=(gen examples/payments/gen reasons)
for d in "${stubs[@]}"; do
  mkdir -p "$snapshot/$(dirname "$d")"
  cp -R "$d" "$snapshot/$d"
done
./generate.sh
for d in "${stubs[@]}"; do
  if ! diff -r "$snapshot/$d" "$d"; then
    echo "clients/go/test.sh: clients/go/$d is stale: commit the output of clients/go/generate.sh" >&2
    exit 1
  fi
done

echo "== go build / go vet"
go build ./...
go vet ./...

echo "== go test"
go test -count=1 -timeout 20m ./...
