/**
 * Issue 16: the first start builds FerretDB for minutes; it must say so while it does,
 * with an honest estimate, instead of one line and minutes of silence.
 */
import { expect } from "chai";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { ensureFerretdb } from "../../services/common/src/embedded-mongo";
import type { Logger } from "../../services/common/src/logger";

function recordingLogger(lines: string[]): Logger {
  const log = (_fields: object, message: string): void => void lines.push(message);
  const logger: Logger = { debug: log, info: log, warn: log, error: log, child: () => logger };
  return logger;
}

describe("FerretDB build progress (issue 16)", function () {
  const saved = { PATH: process.env["PATH"], KEYCAP_FERRETDB_BIN: process.env["KEYCAP_FERRETDB_BIN"] };
  let dir: string;

  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), "keycap-fake-go-"));
    // A `go` that takes a while and then writes its -o output, as the real build does.
    fs.writeFileSync(path.join(dir, "go"), '#!/bin/sh\nsleep 0.6\nwhile [ "$1" != "-o" ]; do shift; done\necho built > "$2"\n', { mode: 0o755 });
    process.env["PATH"] = `${dir}${path.delimiter}${saved.PATH ?? ""}`;
    process.env["KEYCAP_FERRETDB_BIN"] = path.join(dir, "keycap-ferretdb");
  });
  afterEach(() => {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("says it is still building, with elapsed time and a realistic estimate, until the build ends", async () => {
    const lines: string[] = [];
    const binary = await ensureFerretdb(recordingLogger(lines), { progressEveryMs: 150 });
    expect(fs.readFileSync(binary, "utf8")).to.equal("built\n");
    expect(lines[0]).to.match(/^building FerretDB v1\.24\.2 .*typically about 3 minutes on 2 cores/);
    expect(lines[0]).to.not.contain("about a minute");
    const progress = lines.filter((l) => /^still building FerretDB \(\d+ s; typically about 3 minutes on 2 cores/.test(l));
    expect(progress.length, lines.join("\n")).to.be.at.least(2);
    expect(lines.at(-1)).to.equal("FerretDB built");
    const after = lines.length;
    await new Promise((r) => setTimeout(r, 400));
    expect(lines.length, "no progress lines once built").to.equal(after);
  });
});
