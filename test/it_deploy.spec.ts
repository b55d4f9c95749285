/**
 * Issue 16, item 9: the deployment artefacts in deploy/ (container image, compose file,
 * systemd units) refer only to things that exist: settings keycap reads and accepts,
 * `keycap` subcommands, files in the repo and in the image, ports the services listen
 * on. No container engine runs here, so they are checked by parsing them (dockerfile-ast,
 * yaml), by `systemd-analyze verify`, and by running deploy/make-certs.sh.
 */
import { execFileSync, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { expect } from "chai";
import { DockerfileParser, type Copy } from "dockerfile-ast";
import { parse as parseYaml } from "yaml";
import { loadConfig } from "../services/common/src/config";
import { buildProgram } from "../services/cli/src/main";

const root = process.cwd();
const deploy = (...p: string[]): string => path.join(root, "deploy", ...p);

/** Every environment variable keycap's configuration reads (recorded while it loads). */
function settingNames(): Set<string> {
  const read = new Set<string>();
  loadConfig(new Proxy({} as Record<string, string | undefined>, { get: (_t, name) => (read.add(String(name)), undefined) }));
  return read;
}
const SETTINGS = settingNames();
/** Variables the artefacts may set that are not keycap's settings. */
const NOT_KEYCAP = new Set(["NODE_ENV"]);

/** The services `keycap serve` accepts, from the CLI's own definition. */
function serveTargets(): string[] {
  const serve = buildProgram().commands.find((c) => c.name() === "serve");
  expect(serve, "keycap has a serve command").to.not.equal(undefined);
  return serve!.registeredArguments[0]!.description.split("|").map((s) => s.trim());
}

/** Checks argv (after the CLI entry point) is `serve <target>` with a target keycap has. */
function expectServe(argv: string[], where: string): string {
  expect(argv.slice(0, 1), `${where}: ${argv.join(" ")}`).to.deep.equal(["serve"]);
  expect(serveTargets(), `${where}: keycap serve ${argv[1]}`).to.include(argv[1]);
  return argv[1]!;
}

function expectSettings(env: Record<string, string>, where: string): void {
  for (const name of Object.keys(env)) {
    if (NOT_KEYCAP.has(name)) continue;
    expect(SETTINGS.has(name), `${where}: ${name} is not a setting keycap reads`).to.equal(true);
  }
  expect(() => loadConfig(env), `${where}: keycap refuses this configuration`).to.not.throw();
}

function hostPort(a: string): { host: string; port: string } {
  const i = a.lastIndexOf(":");
  return { host: a.slice(0, i), port: a.slice(i + 1) };
}

describe("deployment artefacts (issue 16)", function () {
  describe("deploy/Dockerfile", function () {
    const text = fs.readFileSync(deploy("Dockerfile"), "utf8");
    const dockerfile = DockerfileParser.parse(text);
    const args = Object.fromEntries(dockerfile.getInitialARGs().map((a) => [a.getProperty()!.getName(), a.getProperty()!.getValue() ?? ""]));
    const stages = dockerfile.getFROMs().map((from) => ({
      name: from.getBuildStage() ?? "",
      image: (from.getImage() ?? "").replace(/\$\{(\w+)\}/g, (_m, v: string) => args[v] ?? ""),
      instructions: dockerfile.getInstructions().filter((i) => {
        const line = i.getRange().start.line;
        const next = dockerfile.getFROMs().find((f) => f.getRange().start.line > from.getRange().start.line);
        return line > from.getRange().start.line && (next === undefined || line < next.getRange().start.line);
      }),
    }));
    const runtime = stages[stages.length - 1]!;
    const of = (stage: (typeof stages)[number], keyword: string) => stage.instructions.filter((i) => i.getKeyword() === keyword);

    it("builds in stages on Node 20 (npm ci, then the project's build) and runs on a Node 20 image", function () {
      expect(stages.length).to.be.greaterThanOrEqual(2);
      expect(runtime.image).to.match(/^node:20[.-]/);
      const build = stages.find((s) => of(s, "RUN").some((r) => /\bnpm ci\b/.test(r.getArgumentsContent() ?? "")));
      expect(build, "a stage runs npm ci").to.not.equal(undefined);
      expect(build!.image).to.match(/^node:20[.-]/);
      expect(of(build!, "RUN").some((r) => /\bnpm run build\b/.test(r.getArgumentsContent() ?? ""))).to.equal(true);
      expect(build).to.not.equal(runtime);
    });

    it("copies only files that exist in the repo, and from stages defined before", function () {
      for (const [i, stage] of stages.entries()) {
        for (const copy of of(stage, "COPY") as Copy[]) {
          const from = copy.getFromFlag()?.getValue();
          const paths = copy.getArguments().map((a) => a.getValue());
          if (from === undefined) {
            for (const src of paths.slice(0, -1)) expect(fs.existsSync(path.join(root, src)), `COPY ${src}`).to.equal(true);
          } else {
            expect(
              stages.slice(0, i).map((s) => s.name),
              `COPY --from=${from}`,
            ).to.include(from);
          }
        }
      }
    });

    it("gives the image what keycap reads at run time: package.json, the compiled code, the descriptor set, a health probe", function () {
      const copied = (of(runtime, "COPY") as Copy[]).flatMap((c) => c.getArguments().map((a) => a.getValue()));
      for (const need of ["/src/package.json", "/src/node_modules", "/src/dist", "/src/gen/keycap.binpb", "/usr/local/bin/grpc-health-probe"]) {
        expect(copied, need).to.include(need);
      }
      // The descriptor path the services resolve (services/common/src/repo-paths.ts).
      expect(fs.existsSync(path.join(root, "gen", "keycap.binpb"))).to.equal(true);
    });

    it("runs as a non-root user", function () {
      const users = of(runtime, "USER").map((u) => (u.getArgumentsContent() ?? "").split(":")[0]);
      expect(users).to.have.length.greaterThan(0);
      expect(users[users.length - 1]).to.not.be.oneOf(["root", "0"]);
    });

    it("starts the keycap CLI with a real `serve` subcommand", function () {
      const json = (k: string): string[] => JSON.parse(of(runtime, k)[0]?.getArgumentsContent() ?? "[]") as string[];
      const entry = json("ENTRYPOINT");
      expect(entry[0]).to.equal("node");
      const workdir = of(runtime, "WORKDIR")[0]?.getArgumentsContent();
      expect(entry[1]).to.equal(`${workdir}/dist/services/cli/src/main.js`);
      expect(fs.existsSync(path.join(root, "dist", "services", "cli", "src", "main.js"))).to.equal(true);
      expectServe(json("CMD"), "Dockerfile CMD");
    });
  });

  describe("deploy/compose.yaml", function () {
    type Service = {
      image?: string;
      build?: { context: string; dockerfile: string };
      command?: string[];
      environment?: Record<string, string>;
      ports?: string[];
      volumes?: string[];
      depends_on?: Record<string, { condition: string }>;
      healthcheck?: { test: string[] };
    };
    // Compose interpolates values after parsing: ${VAR:?message} needs VAR (given one
    // here), ${VAR:-default} falls back to the default.
    const interpolate = (v: unknown): unknown => {
      if (typeof v === "string") return v.replace(/\$\{(\w+):\?[^}]*\}/g, "compose-test-value-0123456789").replace(/\$\{(\w+):-([^}]*)\}/g, "$2");
      if (Array.isArray(v)) return v.map(interpolate);
      if (v !== null && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, interpolate(x)]));
      return v;
    };
    const compose = interpolate(parseYaml(fs.readFileSync(deploy("compose.yaml"), "utf8"), { merge: true })) as { services: Record<string, Service> };
    const services = compose.services;
    const keycap = Object.entries(services).filter(([, s]) => s.build !== undefined);
    const envOf = (s: Service): Record<string, string> => Object.fromEntries(Object.entries(s.environment ?? {}).map(([k, v]) => [k, String(v)]));

    it("has a MongoDB 7, one kernel and two ledger replicas built from deploy/Dockerfile", function () {
      const mongo = Object.entries(services).filter(([, s]) => s.image === "mongo:7");
      expect(mongo).to.have.length(1);
      for (const [name, s] of keycap) {
        expect(path.resolve(deploy(), s.build!.context, s.build!.dockerfile), name).to.equal(deploy("Dockerfile"));
      }
      const targets = keycap.map(([name, s]) => expectServe(s.command ?? [], `compose ${name}`));
      expect(targets.filter((t) => t === "kernel")).to.have.length(1);
      expect(targets.filter((t) => t === "ledger")).to.have.length(2);
    });

    it("sets only settings keycap reads, with values it accepts", function () {
      for (const [name, s] of keycap) expectSettings(envOf(s), `compose ${name}`);
    });

    it("points every service at the one MongoDB service, and starts them once it is healthy", function () {
      const [mongoName] = Object.entries(services).find(([, s]) => s.image === "mongo:7")!;
      const uris = new Set(keycap.map(([, s]) => envOf(s)["MONGODB_URI"]));
      expect(uris.size, "every replica writes to the same database").to.equal(1);
      const uri = new URL([...uris][0]!);
      expect(uri.hostname).to.equal(mongoName);
      for (const [name, s] of keycap) expect(s.depends_on?.[mongoName]?.condition, name).to.equal("service_healthy");
      expect(services[mongoName]!.healthcheck?.test.join(" ")).to.match(/ping/);
    });

    it("wires the services to each other by their names and listen ports, over TLS where the ledger requires it", function () {
      const kernel = keycap.find(([, s]) => s.command?.[1] === "kernel")!;
      const ledgers = keycap.filter(([, s]) => s.command?.[1] === "ledger");
      const kernelListen = hostPort(envOf(kernel[1])["KEYCAP_KERNEL_LISTEN"]!);
      for (const [name, s] of keycap) {
        const env = envOf(s);
        const ka = hostPort(env["KEYCAP_KERNEL_ADDRESS"]!);
        expect([ka.host, ka.port], `${name} KEYCAP_KERNEL_ADDRESS`).to.deep.equal([kernel[0], kernelListen.port]);
        const la = hostPort(env["KEYCAP_LEDGER_ADDRESS"]!);
        const ledger = ledgers.find(([n]) => n === la.host);
        expect(ledger, `${name} KEYCAP_LEDGER_ADDRESS names a ledger service`).to.not.equal(undefined);
        expect(la.port).to.equal(hostPort(envOf(ledger![1])["KEYCAP_LEDGER_LISTEN"]!).port);
        // The ledger refuses to learn keys from a plaintext kernel off loopback (services/ledger/src/main.ts).
        if (s.command?.[1] === "ledger") expect(env["KEYCAP_TLS_CA_FILE"] ?? env["KEYCAP_JWKS_FILE"], name).to.be.a("string");
      }
    });

    it("publishes and health-checks the ports each service listens on, with grpc-health-probe", function () {
      for (const [name, s] of keycap) {
        const env = envOf(s);
        const listens = ["KEYCAP_KERNEL_LISTEN", "KEYCAP_LEDGER_LISTEN", "KEYCAP_ADMIN_LISTEN"]
          .filter((k) => env[k] !== undefined)
          .map((k) => hostPort(env[k]!).port);
        for (const p of s.ports ?? []) expect(listens, `${name} publishes ${p}`).to.include(p.split(":").pop());
        const probe = s.healthcheck?.test ?? [];
        expect(probe.slice(0, 2), name).to.deep.equal(["CMD", "grpc-health-probe"]);
        const addr = probe[probe.indexOf("-addr") + 1]!;
        expect(listens, `${name} probes ${addr}`).to.include(hostPort(addr).port);
      }
    });

    it("mounts the TLS files deploy/make-certs.sh makes, for every service name", function () {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-certs-"));
      try {
        execFileSync(deploy("make-certs.sh"), [dir], { stdio: "pipe" });
        const sans = execFileSync("openssl", ["x509", "-in", path.join(dir, "server.pem"), "-noout", "-ext", "subjectAltName"], { encoding: "utf8" });
        for (const [name, s] of keycap) {
          expect(sans, `the certificate names ${name}`).to.include(`DNS:${name}`);
          const env = envOf(s);
          const mount = (s.volumes ?? []).map((v) => v.split(":")).find(([src]) => src === "./certs");
          expect(mount, `${name} mounts ./certs`).to.not.equal(undefined);
          for (const k of ["KEYCAP_TLS_CERT_FILE", "KEYCAP_TLS_KEY_FILE", "KEYCAP_TLS_CA_FILE"]) {
            const file = env[k]!;
            expect(path.dirname(file), `${name} ${k}`).to.equal(mount![1]);
            expect(fs.existsSync(path.join(dir, path.basename(file))), `make-certs.sh makes ${path.basename(file)}`).to.equal(true);
          }
        }
        execFileSync("openssl", ["verify", "-CAfile", path.join(dir, "ca.pem"), path.join(dir, "server.pem")], { stdio: "pipe" });
      } finally {
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });
  });

  describe("deploy/systemd", function () {
    const units = ["keycap-kernel.service", "keycap-ledger.service"].map((u) => deploy("systemd", u));
    /** `Key=value` lines of a unit or env file, in order (later ones win where systemd says so). */
    const entries = (file: string): [string, string][] =>
      fs
        .readFileSync(file, "utf8")
        .split("\n")
        .filter((l) => /^[A-Za-z_][A-Za-z0-9_]*=/.test(l))
        .map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]);

    it("passes systemd-analyze verify without a warning", function () {
      const which = (() => {
        try {
          return execFileSync("sh", ["-c", "command -v systemd-analyze"], { encoding: "utf8" }).trim();
        } catch {
          return "";
        }
      })();
      if (which === "") this.skip();
      // Warnings (unknown keys, bad values) go to stderr with exit status 0: none allowed.
      const r = spawnSync(which, ["verify", ...units], { encoding: "utf8" });
      expect(r.status, r.stderr).to.equal(0);
      expect(r.stderr.trim(), "systemd-analyze verify warnings").to.equal("");
    });

    it("run `keycap serve kernel` and `keycap serve ledger` as a non-root user, hardened", function () {
      const targets = units.map((u) => {
        const e = Object.fromEntries(entries(u));
        const argv = (e["ExecStart"] ?? "").split(/\s+/);
        expect(argv[1], u).to.match(/\/dist\/services\/cli\/src\/main\.js$/);
        expect(e["User"], u).to.be.a("string").and.not.be.oneOf(["root", "0"]);
        for (const [k, v] of [
          ["NoNewPrivileges", "yes"],
          ["ProtectSystem", "strict"],
          ["ProtectHome", "yes"],
          ["PrivateTmp", "yes"],
          ["CapabilityBoundingSet", ""],
        ] as const) {
          expect(e[k], `${path.basename(u)} ${k}`).to.equal(v);
        }
        return expectServe(argv.slice(2), path.basename(u));
      });
      expect(targets).to.deep.equal(["kernel", "ledger"]);
    });

    it("set only settings keycap reads, with values it accepts (the units and keycap.env.example)", function () {
      const shared = Object.fromEntries(entries(deploy("systemd", "keycap.env.example")));
      for (const u of units) {
        const env: Record<string, string> = { ...shared };
        const e = entries(u);
        expect(e.filter(([k]) => k === "EnvironmentFile").map(([, v]) => v)).to.deep.equal(["/etc/keycap/keycap.env"]);
        for (const [, v] of e.filter(([k]) => k === "Environment")) {
          const i = v.indexOf("=");
          env[v.slice(0, i)] = v.slice(i + 1);
        }
        expectSettings(env, path.basename(u));
      }
    });
  });
});
