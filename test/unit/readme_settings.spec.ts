import { expect } from "chai";
import * as fs from "node:fs";
import * as path from "node:path";

const ROOT = path.resolve(__dirname, "..", "..", "..");

function sources(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((d) => {
    const p = path.join(dir, d.name);
    if (d.isDirectory()) return d.name === "node_modules" || d.name === "gen" ? [] : sources(p);
    return d.name.endsWith(".ts") && !d.name.endsWith(".d.ts") ? [p] : [];
  });
}

/** Environment names the shipped code reads; `KEYCAP_${prefix}_…` expands to each listener's name. */
function namesInCode(): Set<string> {
  const names = new Set<string>();
  const files = [...sources(path.join(ROOT, "services")), ...sources(path.join(ROOT, "clients", "ts", "src"))].filter((f) =>
    f.includes(`${path.sep}src${path.sep}`),
  );
  for (const file of files) {
    const text = fs.readFileSync(file, "utf8");
    for (const m of text.matchAll(/\b(?:KEYCAP|MONGODB|MONGOMS)_[A-Z0-9_]*[A-Z0-9]\b/g)) names.add(m[0]);
    for (const m of text.matchAll(/KEYCAP_\$\{prefix\}_([A-Z0-9_]+)/g))
      for (const l of ["KERNEL", "LEDGER", "ADMIN", "GATEWAY", "METRICS"]) names.add(`KEYCAP_${l}_${m[1]}`);
  }
  return names;
}

/** docs/configuration.md (the README's "Configuration" section until issue 31), table and all. */
function configurationSection(): string {
  const page = fs.readFileSync(path.join(ROOT, "docs", "configuration.md"), "utf8");
  expect(page.startsWith("# Configuration\n"), "docs/configuration.md starts with # Configuration").to.equal(true);
  return page;
}

// Read only under the test settings; docs/tests.md ("Torture") describes it.
const TEST_ONLY = new Set(["KEYCAP_TEST_FAULT_POINTS"]);

describe("the configuration table, docs/configuration.md (issue 16)", function () {
  it("names every KEYCAP_*, MONGODB_* and MONGOMS_* setting the code reads", function () {
    const section = configurationSection();
    const documented = new Set(section.match(/\b(?:KEYCAP|MONGODB|MONGOMS)_[A-Z0-9_]*[A-Z0-9]\b/g) ?? []);
    const missing = [...namesInCode()].filter((n) => !TEST_ONLY.has(n) && !documented.has(n)).sort();
    expect(missing, "settings the code reads that docs/configuration.md does not name").to.deep.equal([]);
  });

  it("names no setting the code does not read", function () {
    const inCode = namesInCode();
    const stale = [...new Set(configurationSection().match(/\b(?:KEYCAP|MONGODB|MONGOMS)_[A-Z0-9_]*[A-Z0-9]\b/g) ?? [])].filter((n) => !inCode.has(n)).sort();
    expect(stale).to.deep.equal([]);
  });
});
