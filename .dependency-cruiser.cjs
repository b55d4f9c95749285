/**
 * Import boundaries, checked by `make lint` (npx depcruise). Why each exists:
 * docs/decisions/0009-layers-and-import-boundaries.md.
 */
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: "domain-is-transport-free",
      comment:
        "Derivation, verification rules and the ledger's write rule import neither gRPC nor MongoDB, not even through another module: one layer (services/common/src/grpc-status.ts) maps domain errors to gRPC.",
      severity: "error",
      from: { path: "^services/[^/]+/src/domain/" },
      to: { path: "node_modules/(@grpc/grpc-js|mongodb)/", reachable: true },
    },
    {
      name: "errors-are-transport-free",
      comment: "KeycapError is the domain's error: it carries a canonical code, never a gRPC object.",
      severity: "error",
      from: { path: "^services/common/src/errors\\.ts$" },
      to: { path: "node_modules/", reachable: true },
    },
    {
      name: "storage-speaks-no-grpc",
      comment: "Stores (journal, registry, entries, principals, grants) raise domain errors; they do not import gRPC.",
      severity: "error",
      from: { path: "^services/[^/]+/src/[^/]*-(journal|registry|store)\\.ts$" },
      to: { path: "node_modules/@grpc/grpc-js/" },
    },
    {
      name: "client-is-not-the-server",
      comment: "The TypeScript client ships to users: it may use generated stubs, never service code.",
      severity: "error",
      from: { path: "^clients/ts/" },
      to: { path: "^services/" },
    },
    {
      name: "client-package-is-self-contained",
      comment: "clients/ts is its own npm package (@keycap/client): it imports only its own files and its dependencies.",
      severity: "error",
      from: { path: "^clients/ts/" },
      to: { dependencyTypes: ["local"], pathNot: "^clients/ts/" },
    },
    {
      name: "ledger-cannot-mint",
      comment: "The ledger verifies capabilities; it must not be able to sign them (no minting code, no private keys).",
      severity: "error",
      from: { path: "^services/ledger/" },
      to: { path: "^services/kernel/src/(capability-minter|signing-keys)\\.ts$", reachable: true },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    exclude: { path: "(^|/)dist/" },
  },
};
