import { expect } from "chai";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { defaultDataDir } from "../../clients/ts/src";
import { resolveDataDir } from "../../services/common/src/data-dir";
import { loadConfig } from "../../services/common/src/config";

describe("the default data directory (issue 16)", function () {
  let top: string;
  beforeEach(() => {
    top = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), "keycap-datadir-")));
  });
  afterEach(() => fs.rmSync(top, { recursive: true, force: true }));

  it("is the .keycap folder above a subfolder, for the services, the CLI and the TypeScript client alike", function () {
    fs.mkdirSync(path.join(top, ".keycap"));
    const sub = path.join(top, "clients", "python");
    fs.mkdirSync(sub, { recursive: true });
    const want = path.join(top, ".keycap");
    expect(resolveDataDir(undefined, sub)).to.equal(want);
    expect(defaultDataDir({}, sub)).to.equal(want);
    const cwd = process.cwd();
    try {
      process.chdir(sub);
      expect(loadConfig({}).dataDir).to.equal(want);
      expect(loadConfig({}).signingKeyFile).to.equal(path.join(want, "signing-keys.json"));
    } finally {
      process.chdir(cwd);
    }
  });

  it("is ./.keycap where there is none above, and KEYCAP_DATA_DIR wins, relative to the folder", function () {
    const sub = path.join(top, "a");
    fs.mkdirSync(sub);
    for (const [configured, want] of [
      [undefined, path.join(sub, ".keycap")],
      ["data", path.join(sub, "data")],
      ["/srv/keycap", "/srv/keycap"],
    ] as const) {
      // A .keycap outside `top` (say in $HOME) would be found first; only compare when there is none.
      if (configured === undefined && resolveDataDir(undefined, top) !== path.join(top, ".keycap")) continue;
      expect(resolveDataDir(configured, sub), String(configured)).to.equal(want);
      expect(defaultDataDir(configured === undefined ? {} : { KEYCAP_DATA_DIR: configured }, sub), String(configured)).to.equal(want);
    }
  });

  it("skips a file named .keycap", function () {
    fs.mkdirSync(path.join(top, ".keycap"));
    const sub = path.join(top, "b");
    fs.mkdirSync(sub);
    fs.writeFileSync(path.join(sub, ".keycap"), "not a folder");
    expect(resolveDataDir(undefined, sub)).to.equal(path.join(top, ".keycap"));
    expect(defaultDataDir({}, sub)).to.equal(path.join(top, ".keycap"));
  });
});
