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
      name: "service-logic-is-wire-free",
      comment:
        "The kernel's and the ledger's service logic (kernel.ts, ledger.ts) take and return their own types: the wire's messages are mapped in *-proto.ts and grpc-js is bound in *-grpc.ts.",
      severity: "error",
      from: { path: "^services/(kernel/src/kernel|ledger/src/ledger)\\.ts$" },
      to: { path: "(^gen/|node_modules/@grpc/grpc-js/)" },
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
    {
      name: "services-meet-at-entry-points",
      comment:
        "A service uses another only through its entry point (src/index.ts, or src/main.ts where it only starts): the capability module, the sink, the kernel. services/common is the shared floor every service stands on. The capability's claims (claims.ts) are a second, transport-free entry, so domain code can name them without reaching gRPC.",
      severity: "error",
      from: { path: "^services/([^/]+)/" },
      to: {
        path: "^services/[^/]+/src/",
        pathNot: ["^services/$1/", "^services/common/", "^services/[^/]+/src/(index|main)\\.ts$", "^services/capability/src/claims\\.ts$"],
      },
    },
    {
      name: "services-use-the-client-package-entry",
      comment: "Service code uses the TypeScript client as its users do: through clients/ts/src/index.ts, never a file the package does not export.",
      severity: "error",
      from: { path: "^services/" },
      to: { path: "^clients/ts/src/", pathNot: "^clients/ts/src/index\\.ts$" },
    },
    {
      name: "common-is-the-ground-floor",
      comment:
        "services/common is what every service stands on; it depends on no service (the capability module included), so the floors stay entry points -> services -> capability -> common.",
      severity: "error",
      from: { path: "^services/common/" },
      to: { path: "^services/(?!common/)" },
    },
    {
      name: "capability-stands-on-common-only",
      comment: "The capability module (claims, verifier, key sources, refusal) is used by the ledger, sinks and gateways; it depends on no service but common.",
      severity: "error",
      from: { path: "^services/capability/" },
      to: { path: "^services/(?!(capability|common)/)" },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    exclude: { path: "(^|/)dist/" },
  },
};
