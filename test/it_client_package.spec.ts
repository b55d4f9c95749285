/**
 * Issue 14: the TypeScript client is its own npm package (@keycap/client, clients/ts):
 * it builds alone from its own folder, `npm pack` ships only its files, and an
 * application that installs the tarball reaches exactly what the exports map names.
 */
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { expect } from "chai";

const root = process.cwd();
const pkgDir = path.join(root, "clients", "ts");

describe("the TypeScript client package (issue 14)", function () {
  this.timeout(180_000);
  let app: string;

  before(function () {
    execFileSync(process.execPath, [path.join(root, "node_modules", "typescript", "bin", "tsc"), "-p", pkgDir], { stdio: "pipe" });
    app = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-client-app-"));
    const packed = JSON.parse(execFileSync("npm", ["pack", "--json", "--pack-destination", app], { cwd: pkgDir, encoding: "utf8" })) as {
      filename: string;
      files: { path: string }[];
    }[];
    const tarball = path.join(app, packed[0]!.filename);
    const installed = path.join(app, "node_modules", "@keycap", "client");
    fs.mkdirSync(installed, { recursive: true });
    execFileSync("tar", ["xzf", tarball, "-C", installed, "--strip-components=1"]);
    // Its dependencies, as npm would install them (the registry is not the subject here).
    for (const dep of ["@grpc", "@bufbuild", "@js-sdsl", "long", "lodash.camelcase", "protobufjs", "@protobufjs", "@types"]) {
      const from = path.join(root, "node_modules", dep);
      if (fs.existsSync(from)) fs.symlinkSync(from, path.join(app, "node_modules", dep));
    }
  });
  after(() => fs.rmSync(app, { recursive: true, force: true }));

  function inApp(code: string): string {
    return execFileSync(process.execPath, ["-e", code], { cwd: app, encoding: "utf8" });
  }

  it("ships its own compiled sources and generated stubs, nothing from outside its folder", function () {
    const files = fs.readdirSync(path.join(app, "node_modules", "@keycap", "client", "dist"));
    expect(files).to.have.members(["src", "gen"]);
    const js = fs.readFileSync(path.join(app, "node_modules", "@keycap", "client", "dist", "src", "kernel-client.js"), "utf8");
    expect(js).to.not.match(/require\("\.\.\/\.\.\/\.\./);
  });

  it("is usable by name from an application that installed it", function () {
    const out = inApp(
      `const k = require("@keycap/client"); console.log([typeof k.KernelClient, typeof k.Runtime, typeof k.defineTool, k.Reasons.KEY_FIELD_MISSING].join(" "))`,
    );
    expect(out.trim()).to.equal("function function function KEY_FIELD_MISSING");
  });

  it("exposes only what its exports map names (no deep imports into its internals)", function () {
    expect(() => inApp(`require("@keycap/client/dist/src/rpc")`)).to.throw(/ERR_PACKAGE_PATH_NOT_EXPORTED/);
    expect(inApp(`console.log(require("@keycap/client/package.json").name)`).trim()).to.equal("@keycap/client");
  });
});
