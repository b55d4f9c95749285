import * as fs from "node:fs";
import * as path from "node:path";
import { expect } from "chai";
import { BinaryWriter } from "@bufbuild/protobuf/wire";
import { BeginCallRequest, KernelServiceService } from "../../gen/ts/keycap/kernel/v1/kernel";
import { invalidArgument, KeycapError } from "../../services/common/src/errors";
import { hadIllFormedUtf8, withUtf8Check } from "../../services/common/src/utf8-check";
import { compileArgumentSchema } from "../../services/common/src/domain/argument-schema";
import { formatJsonPointer, parseJsonPointer, resolveJsonPointer } from "../../services/common/src/domain/json-pointer";
import {
  canonicalKeyDocument,
  deriveKey,
  KEY_SCHEME,
  readRequestId,
  validateDerivation,
  type KeyDerivationSpec,
} from "../../services/common/src/domain/key-derivation";
import { DEFAULT_JSON_LIMITS, parseArguments, type JsonLimits } from "../../services/common/src/domain/strict-json";

// Tests run from the repository root (mocha's convention here); __dirname would
// point into the compiled output, wherever that is.
const VECTORS_FILE = path.join(process.cwd(), "test", "vectors", "key-derivation.json");

interface Vector {
  name: string;
  tool_id: string;
  derivation: { fields: string[]; version: number; context_fields?: "run_id"[] };
  context: { run_id?: string; run_id_utf8_hex?: string };
  /** One of the two: the text, or its UTF-8 bytes when they are not well-formed. */
  arguments_json?: string;
  arguments_utf8_hex?: string;
  expect: { key: string; canonical: string } | { error: string };
}

interface VectorFile {
  scheme: string;
  limits: { max_bytes: number; max_depth: number };
  vectors: Vector[];
}

const vectorFile = JSON.parse(fs.readFileSync(VECTORS_FILE, "utf8")) as VectorFile;

function specOf(v: Vector): KeyDerivationSpec {
  return { fields: v.derivation.fields, version: v.derivation.version, contextFields: v.derivation.context_fields ?? [] };
}

/**
 * The vector's strings as the kernel receives them: raw bytes go through the
 * kernel's own request decoder, which refuses ill-formed UTF-8 (INVALID_UTF8).
 */
function decodedInputs(v: Vector): { argumentsJson: string; runId: string } {
  const argBytes = v.arguments_utf8_hex !== undefined ? Buffer.from(v.arguments_utf8_hex, "hex") : Buffer.from(v.arguments_json ?? "", "utf8");
  const runBytes = v.context.run_id_utf8_hex !== undefined ? Buffer.from(v.context.run_id_utf8_hex, "hex") : Buffer.from(v.context.run_id ?? "", "utf8");
  const w = new BinaryWriter();
  w.uint32((3 << 3) | 2).bytes(runBytes);
  w.uint32((4 << 3) | 2).bytes(argBytes);
  const request = withUtf8Check(KernelServiceService).beginCall!.requestDeserialize(Buffer.from(w.finish())) as BeginCallRequest;
  if (hadIllFormedUtf8(request)) throw invalidArgument("INVALID_UTF8", `vector ${v.name}: a string is not well-formed UTF-8`);
  return { argumentsJson: request.argumentsJson, runId: request.runId };
}

function runVector(v: Vector): { key: string; canonical: string } {
  const limits: JsonLimits = { maxBytes: vectorFile.limits.max_bytes, maxDepth: vectorFile.limits.max_depth };
  const input = decodedInputs(v);
  const args = parseArguments(input.argumentsJson, limits);
  const ctx = { runId: input.runId };
  return { key: deriveKey(v.tool_id, specOf(v), args, ctx), canonical: canonicalKeyDocument(v.tool_id, specOf(v), args, ctx) };
}

function keyOfVector(name: string): string {
  const v = vectorFile.vectors.find((x) => x.name === name);
  if (!v) throw new Error(`no vector ${name}`);
  return runVector(v).key;
}

/** Runs `fn` and returns the KeycapError it throws; fails if it throws nothing or something else. */
function refusal(fn: () => unknown): KeycapError {
  try {
    fn();
  } catch (err) {
    expect(err).to.be.instanceOf(KeycapError);
    const e = err as KeycapError;
    expect(e.code).to.equal(3); // INVALID_ARGUMENT
    return e;
  }
  expect.fail("expected a KeycapError");
}

function expectRefused(fn: () => unknown, reason: string): KeycapError {
  const e = refusal(fn);
  expect(e.reason, e.message).to.equal(reason);
  return e;
}

const ORDER: KeyDerivationSpec = { fields: ["/order_id"], version: 1, contextFields: [] };
const ORDER_IN_RUN: KeyDerivationSpec = { fields: ["/order_id"], version: 1, contextFields: ["run_id"] };
const RUN = { runId: "run-1" };

function key(json: string, spec: KeyDerivationSpec = ORDER, ctx = RUN, tool = "payments.charge"): string {
  return deriveKey(tool, spec, parseArguments(json), ctx);
}

describe("key derivation", () => {
  describe("which reason wins when an input has several problems (ADR 0002)", () => {
    const tiny: JsonLimits = { maxBytes: 24, maxDepth: 2 };
    it("size before anything in the text", () => {
      expectRefused(() => parseArguments('{"a":1,"a":[[[1]]], "pad":0}', tiny), "ARGUMENTS_TOO_LARGE");
    });
    it("inside the text, the problem met first wins", () => {
      expectRefused(() => parseArguments('{"a":1,"a":[[1]]}', tiny), "ARGUMENTS_DUPLICATE_MEMBER");
      expectRefused(() => parseArguments('{"b":[[1]],"b":1}', tiny), "ARGUMENTS_TOO_DEEP");
      expectRefused(() => parseArguments('{"a":1e400,"a":1}'), "ARGUMENTS_NON_FINITE_NUMBER");
      expectRefused(() => parseArguments('{"a":"\\ud800","a":1}'), "ARGUMENTS_INVALID_UNICODE");
      expectRefused(() => parseArguments('{"a":1,"a":2,}'), "ARGUMENTS_DUPLICATE_MEMBER");
      expectRefused(() => parseArguments('{"a":1,,"a":2}'), "ARGUMENTS_NOT_JSON");
    });
    it("not an object only once the text is JSON", () => {
      expectRefused(() => parseArguments("[1,1"), "ARGUMENTS_NOT_JSON");
      expectRefused(() => parseArguments("[1,1]"), "ARGUMENTS_NOT_OBJECT");
    });
    it("the derivation before the fields, then the fields in listed order, then the run id", () => {
      const args = parseArguments('{"b":null}');
      expectRefused(
        () => deriveKey("t", { fields: ["/a", "/a"], version: 1, contextFields: ["run_id"] }, args, { runId: "" }),
        "KEY_DERIVATION_DUPLICATE_FIELD",
      );
      expectRefused(() => deriveKey("t", { fields: ["/b", "/a"], version: 1, contextFields: ["run_id"] }, args, { runId: "" }), "KEY_FIELD_NULL");
      expectRefused(() => deriveKey("t", { fields: ["/a", "/b"], version: 1, contextFields: ["run_id"] }, args, { runId: "" }), "KEY_FIELD_MISSING");
      expectRefused(
        () => deriveKey("t", { fields: ["/c"], version: 1, contextFields: ["run_id"] }, parseArguments('{"c":1}'), { runId: "" }),
        "RUN_ID_REQUIRED",
      );
    });
  });

  describe("published test vectors (test/vectors/key-derivation.json)", () => {
    it("pins scheme v1 with the default limits and at least 30 vectors", () => {
      expect(vectorFile.scheme).to.equal(KEY_SCHEME);
      expect(vectorFile.limits).to.deep.equal({ max_bytes: DEFAULT_JSON_LIMITS.maxBytes, max_depth: DEFAULT_JSON_LIMITS.maxDepth });
      expect(vectorFile.vectors.length).to.be.at.least(30);
      expect(new Set(vectorFile.vectors.map((v) => v.name)).size).to.equal(vectorFile.vectors.length);
    });

    for (const v of vectorFile.vectors) {
      const expected = v.expect;
      if ("key" in expected) {
        it(`derives the published key and canonical document for "${v.name}"`, () => {
          const got = runVector(v);
          expect(got.canonical).to.equal(expected.canonical);
          expect(got.key).to.equal(expected.key);
        });
      } else {
        it(`refuses "${v.name}" with ${expected.error}`, () => {
          expectRefused(() => runVector(v), expected.error);
        });
      }
    }

    const sameKey: [string, string[]][] = [
      [
        "basic-string-field",
        [
          "member-order-does-not-matter",
          "whitespace-does-not-matter",
          "unnamed-timestamp-changes-nothing",
          "unnamed-timestamp-changes-nothing-2",
          "unnamed-field-changes-nothing",
          "unnamed-unsafe-integer-is-fine",
          "run-id-not-named-is-ignored",
        ],
      ],
      ["two-fields", ["field-list-order-does-not-matter"]],
      ["basic-string-field", ["version-0-is-version-1"]],
      ["html-characters-are-not-escaped", ["html-characters-escaped-in-input"]],
      ["line-and-paragraph-separators-literal", ["line-and-paragraph-separators-escaped"]],
      ["context-run-a", ["context-run-a-again-reordered"]],
      ["nested-object", ["nested-object-reordered"]],
      ["unicode-nfc", ["unicode-escaped-nfc"]],
      ["literal-A", ["escaped-A"]],
      ["astral-literal", ["astral-escaped-pair"]],
      ["integer-1", ["decimal-1.0", "exponent-1e0", "exponent-10E-1"]],
      ["zero", ["negative-zero", "negative-zero-float"]],
    ];
    for (const [anchor, equals] of sameKey) {
      it(`gives ${anchor} and its equivalents (${equals.join(", ")}) one key`, () => {
        for (const name of equals) expect(keyOfVector(name), name).to.equal(keyOfVector(anchor));
      });
    }

    const differentKey: [string, string][] = [
      ["basic-string-field", "key-field-value-changes-key"],
      ["basic-string-field", "tool-id-changes-key"],
      ["basic-string-field", "version-changes-key"],
      ["context-run-a", "context-run-b"],
      ["array", "array-order-matters"],
      ["unicode-nfc", "unicode-nfd"],
      ["noncharacter-fffe", "noncharacter-ffff"],
      ["noncharacter-fffe", "replacement-character"],
      ["noncharacter-ffff", "replacement-character"],
      ["noncharacter-fdd0", "noncharacter-10ffff"],
    ];
    for (const [a, b] of differentKey) {
      it(`gives ${a} and ${b} different keys`, () => {
        expect(keyOfVector(a)).to.not.equal(keyOfVector(b));
      });
    }
  });

  describe("deriveKey", () => {
    const args = '{"order_id":"A-17","amount":1250,"requested_at":"2025-03-01T10:00:00Z"}';

    it("gives the same key on 100 derivations from the same arguments", () => {
      const parsed = parseArguments(args);
      const keys = new Set<string>();
      for (let i = 0; i < 100; i++) keys.add(deriveKey("payments.charge", ORDER_IN_RUN, parsed, RUN));
      expect(keys.size).to.equal(1);
    });

    it("gives the same key whether the arguments are parsed once or afresh each time", () => {
      const once = parseArguments(args);
      for (let i = 0; i < 10; i++) expect(key(args, ORDER_IN_RUN)).to.equal(deriveKey("payments.charge", ORDER_IN_RUN, once, RUN));
    });

    it("gives a 43-character base64url key without padding (256 bits)", () => {
      expect(key(args)).to.match(/^[A-Za-z0-9_-]{43}$/);
    });

    it("gives the same key when members are reordered", () => {
      expect(key('{"requested_at":"2025-03-01T10:00:00Z","amount":1250,"order_id":"A-17"}')).to.equal(key(args));
    });

    it("gives the same key when members of a nested key field are reordered", () => {
      const spec: KeyDerivationSpec = { fields: ["/customer"], version: 1, contextFields: [] };
      expect(key('{"customer":{"b":[1,{"y":2,"x":1}],"a":"z"}}', spec)).to.equal(key('{"customer":{"a":"z","b":[1,{"x":1,"y":2}]}}', spec));
    });

    it("gives the same key when an unnamed requested_at changes", () => {
      expect(key('{"order_id":"A-17","amount":1250,"requested_at":"2031-12-31T23:59:59Z"}')).to.equal(key(args));
    });

    it("gives the same key when an unnamed field is added or removed", () => {
      expect(key('{"order_id":"A-17"}')).to.equal(key(args));
    });

    it("gives a different key when a key field changes", () => {
      expect(key('{"order_id":"A-18","amount":1250,"requested_at":"2025-03-01T10:00:00Z"}')).to.not.equal(key(args));
    });

    it("gives a different key when the run id changes and the derivation names it", () => {
      expect(key(args, ORDER_IN_RUN, { runId: "run-2" })).to.not.equal(key(args, ORDER_IN_RUN, RUN));
    });

    it("ignores the run id when the derivation does not name it", () => {
      expect(key(args, ORDER, { runId: "run-2" })).to.equal(key(args, ORDER, RUN));
    });

    it("gives a different key when the tool id or the derivation version changes", () => {
      expect(key(args, ORDER, RUN, "payments.refund")).to.not.equal(key(args));
      expect(key(args, { ...ORDER, version: 2 })).to.not.equal(key(args));
    });

    it("keeps a string and a number with the same digits apart", () => {
      expect(key('{"order_id":"17"}')).to.not.equal(key('{"order_id":17}'));
    });

    it("keeps a key field's value apart from a pointer that looks like it", () => {
      const spec: KeyDerivationSpec = { fields: ["/a", "/b"], version: 1, contextFields: [] };
      expect(key('{"a":"x","b":"y"}', spec)).to.not.equal(key('{"a":"y","b":"x"}', spec));
    });

    it("refuses a key field that is missing, null, or holds an unsafe integer", () => {
      expect(expectRefused(() => key('{"amount":1}'), "KEY_FIELD_MISSING").metadata).to.deep.equal({ field: "/order_id" });
      expect(expectRefused(() => key('{"order_id":null}'), "KEY_FIELD_NULL").message).to.contain("/order_id");
      const nested: KeyDerivationSpec = { fields: ["/order"], version: 1, contextFields: [] };
      const e = expectRefused(() => key('{"order":{"ids":[9007199254740993]}}', nested), "KEY_FIELD_UNSAFE_INTEGER");
      expect(e.metadata["field"]).to.equal("/order/ids/0");
    });

    it("accepts an unsafe integer in a field whose name merely starts like a key field", () => {
      expect(() => key('{"order_id":"A","order_idx":9007199254740993}')).to.not.throw();
    });

    it("refuses a derivation that names run_id when the call has none", () => {
      expectRefused(() => key(args, ORDER_IN_RUN, { runId: "" }), "RUN_ID_REQUIRED");
    });

    it("re-checks the derivation instead of trusting it", () => {
      expectRefused(() => key(args, { fields: [], version: 1, contextFields: [] }), "KEY_DERIVATION_NO_FIELDS");
      expectRefused(() => key(args, { fields: ["order_id"], version: 1, contextFields: [] }), "INVALID_JSON_POINTER");
    });

    it("refuses an empty tool id", () => {
      expectRefused(() => key(args, ORDER, RUN, ""), "TOOL_ID_REQUIRED");
    });
  });

  describe("validateDerivation (registration time)", () => {
    const spec = (fields: string[], version = 1): KeyDerivationSpec => ({ fields, version, contextFields: ["run_id"] });

    it("accepts a derivation naming distinct valid pointers", () => {
      expect(() => validateDerivation(spec(["/order_id", "/items/0/sku", "/a~1b"]))).to.not.throw();
    });

    it("refuses an empty field list, naming key.fields", () => {
      const e = expectRefused(() => validateDerivation(spec([])), "KEY_DERIVATION_NO_FIELDS");
      expect(e.message).to.contain("key.fields");
      expect(e.metadata["field"]).to.equal("key.fields");
    });

    it("refuses an invalid pointer, naming its position in key.fields", () => {
      const e = expectRefused(() => validateDerivation(spec(["/ok", "not-a-pointer"])), "INVALID_JSON_POINTER");
      expect(e.metadata["field"]).to.equal("key.fields[1]");
      expectRefused(() => validateDerivation(spec([""])), "INVALID_JSON_POINTER");
    });

    it("refuses a pointer named twice", () => {
      const e = expectRefused(() => validateDerivation(spec(["/a", "/b", "/a"])), "KEY_DERIVATION_DUPLICATE_FIELD");
      expect(e.metadata["field"]).to.equal("key.fields[2]");
    });

    it("reads version 0 (protobuf's 'not set') as version 1, and refuses a negative or fractional version", () => {
      const args = '{"a":"x"}';
      expect(key(args, spec(["/a"], 0))).to.equal(key(args, spec(["/a"], 1)));
      expect(key(args, spec(["/a"], 0))).to.not.equal(key(args, spec(["/a"], 2)));
      expectRefused(() => validateDerivation(spec(["/a"], -1)), "KEY_DERIVATION_BAD_VERSION");
      expectRefused(() => validateDerivation(spec(["/a"], 1.5)), "KEY_DERIVATION_BAD_VERSION");
    });

    it("refuses a context field other than run_id", () => {
      const bad = { fields: ["/a"], version: 1, contextFields: ["host"] } as unknown as KeyDerivationSpec;
      expectRefused(() => validateDerivation(bad), "KEY_DERIVATION_BAD_CONTEXT_FIELD");
    });

    const schema = compileArgumentSchema(
      JSON.stringify({
        type: "object",
        properties: {
          order_id: { type: "string" },
          requested_at: { type: "string", format: "date-time" },
          trace_id: { type: "string", "x-keycap-volatile": true },
        },
      }),
    );

    it("accepts a field the schema defines and does not mark volatile", () => {
      expect(() => validateDerivation(spec(["/order_id"]), schema)).to.not.throw();
    });

    it("refuses a field the schema does not define", () => {
      const e = expectRefused(() => validateDerivation(spec(["/order_id", "/customer"]), schema), "KEY_FIELD_NOT_IN_SCHEMA");
      expect(e.message).to.contain("/customer");
    });

    it("refuses a field the schema marks volatile, by format or by x-keycap-volatile", () => {
      const byFormat = expectRefused(() => validateDerivation(spec(["/requested_at"]), schema), "KEY_FIELD_VOLATILE");
      expect(byFormat.message).to.contain("date-time");
      const byFlag = expectRefused(() => validateDerivation(spec(["/trace_id"]), schema), "KEY_FIELD_VOLATILE");
      expect(byFlag.message).to.contain("x-keycap-volatile");
    });
  });

  describe("readRequestId (Queryable tools)", () => {
    const read = (json: string) => readRequestId(parseArguments(json), "/request_id");

    it("reads a non-empty string or a safe integer", () => {
      expect(read('{"request_id":"req-1"}')).to.equal("req-1");
      expect(read('{"request_id":42}')).to.equal("42");
      expect(read(`{"request_id":"${"x".repeat(256)}"}`)).to.have.length(256);
    });

    it("refuses a missing or null request id", () => {
      expectRefused(() => read("{}"), "REQUEST_ID_FIELD_MISSING");
      expectRefused(() => read('{"request_id":null}'), "REQUEST_ID_FIELD_MISSING");
    });

    it("refuses an empty, overlong, fractional, unsafe or structured request id", () => {
      for (const bad of ['""', `"${"x".repeat(257)}"`, "1.5", "9007199254740993", "true", "[1]", '{"a":1}']) {
        expectRefused(() => read(`{"request_id":${bad}}`), "REQUEST_ID_INVALID");
      }
    });
  });
});

describe("strict JSON arguments", () => {
  it("parses a JSON object and its values exactly", () => {
    const { value, unsafeIntegerPaths } = parseArguments('{"s":"x","n":-1.5e2,"b":[true,false,null],"o":{}}');
    expect(value).to.deep.equal({ s: "x", n: -150, b: [true, false, null], o: {} });
    expect(unsafeIntegerPaths.size).to.equal(0);
  });

  it("refuses input past the byte limit, counting UTF-8 bytes", () => {
    const limits = { maxBytes: 20, maxDepth: 32 };
    expect(() => parseArguments('{"a":"éééééé"}', limits)).to.not.throw(); // 20 bytes, 14 characters
    expectRefused(() => parseArguments('{"a":"ééééééé"}', limits), "ARGUMENTS_TOO_LARGE"); // 22 bytes, 15 characters
    expectRefused(() => parseArguments(`{"a":"${"x".repeat(DEFAULT_JSON_LIMITS.maxBytes)}"}`), "ARGUMENTS_TOO_LARGE");
  });

  it("refuses text that is not RFC 8259 JSON, giving the position", () => {
    const cases = [
      "",
      "   ",
      "{",
      '{"a":1,}',
      '{"a":[1,2,]}',
      '{"a":01}',
      '{"a":-}',
      '{"a":1.}',
      '{"a":.5}',
      '{"a":1e}',
      '{"a":+1}',
      '{"a":0x10}',
      '{"a":Infinity}',
      '{"a":NaN}',
      '{"a":1}//c',
      '{"a":1/*c*/}',
      "{'a':1}",
      "{a:1}",
      '{"a":"\\x41"}',
      '{"a":"\\u12"}',
      '{"a":"tab\there"}',
      '{"a":"unterminated}',
      '{"a":tru}',
      '{"a":True}',
      '{"a":1}{"b":2}',
      '{"a":1} x',
      "\ufeff{}",
      '{"a":1}\u00a0',
      '{\u000b"a":1}',
      '{"a"\u3000:1}',
    ];
    for (const text of cases) {
      const e = expectRefused(() => parseArguments(text), "ARGUMENTS_NOT_JSON");
      expect(e.message, JSON.stringify(text)).to.match(/line \d+, column \d+, offset \d+/);
    }
    expect(refusal(() => parseArguments('{\n  "a": 01\n}')).message).to.contain("line 2, column 8");
  });

  it("accepts all four JSON whitespace characters", () => {
    expect(parseArguments(' \t\r\n{ \t\r\n"a" \t\r\n: \t\r\n1 \t\r\n} \t\r\n').value).to.deep.equal({ a: 1 });
  });

  it("refuses JSON that is not an object", () => {
    for (const text of ["[]", '"s"', "1", "true", "null"]) expectRefused(() => parseArguments(text), "ARGUMENTS_NOT_OBJECT");
  });

  it("refuses duplicate member names, naming the member and its path", () => {
    const e = expectRefused(() => parseArguments('{"a":{"list":[{"id":1,"id":2}]}}'), "ARGUMENTS_DUPLICATE_MEMBER");
    expect(e.message).to.contain('"id"').and.to.contain("/a/list/0");
    expect(e.metadata["field"]).to.equal("/a/list/0/id");
    expectRefused(() => parseArguments('{"a":1,"\\u0061":1}'), "ARGUMENTS_DUPLICATE_MEMBER");
    expectRefused(() => parseArguments('{"__proto__":1,"__proto__":2}'), "ARGUMENTS_DUPLICATE_MEMBER");
  });

  it("refuses nesting past the depth limit, and accepts it up to the limit", () => {
    const nested = (n: number) => '{"a":' + "[".repeat(n - 1) + "]".repeat(n - 1) + "}";
    expect(() => parseArguments(nested(32))).to.not.throw();
    const e = expectRefused(() => parseArguments(nested(33)), "ARGUMENTS_TOO_DEEP");
    expect(e.metadata["limit"]).to.equal("32");
    expectRefused(() => parseArguments('{"a":{"b":1}}', { maxBytes: 100, maxDepth: 1 }), "ARGUMENTS_TOO_DEEP");
  });

  it("refuses 100k nested arrays without overflowing the stack", () => {
    const deep = '{"a":' + "[".repeat(100_000) + "]".repeat(100_000) + "}";
    expectRefused(() => parseArguments(deep, { maxBytes: 1_000_000, maxDepth: 32 }), "ARGUMENTS_TOO_DEEP");
    const unclosed = "[".repeat(100_000);
    expectRefused(() => parseArguments(unclosed, { maxBytes: 1_000_000, maxDepth: 32 }), "ARGUMENTS_TOO_DEEP");
  });

  it("refuses limits that are not sane, as a programming error", () => {
    expect(() => parseArguments("{}", { maxBytes: 0, maxDepth: 32 })).to.throw(RangeError);
    expect(() => parseArguments("{}", { maxBytes: 100, maxDepth: 1_000_000 })).to.throw(RangeError);
  });

  it("refuses numbers outside the range of a double", () => {
    for (const n of ["1e400", "-1e400", "1" + "0".repeat(400)]) {
      const e = expectRefused(() => parseArguments(`{"x":{"n":${n}}}`), "ARGUMENTS_NON_FINITE_NUMBER");
      expect(e.metadata["field"]).to.equal("/x/n");
    }
  });

  it("refuses lone surrogates in strings and member names, escaped or raw", () => {
    for (const text of ['{"a":"\\uD800"}', '{"a":"\\uDC00x"}', '{"a":"x\\uD83D"}', '{"\\uDE00":1}', '{"a":"\uD800"}', '{"a":"\\uDE00\\uD83D"}']) {
      expectRefused(() => parseArguments(text), "ARGUMENTS_INVALID_UNICODE");
    }
    expect(parseArguments('{"a":"\\uD83D\\uDE00","b":"\uD83D\uDE00"}').value).to.deep.equal({ a: "😀", b: "😀" });
  });

  it("records the pointer of every integer a double cannot hold exactly", () => {
    const { value, unsafeIntegerPaths } = parseArguments(
      '{"ok":9007199254740991,"big":9007199254740993,"neg":-9007199254740993,"list":[1,18446744073709551616],"a/b":{"~":9007199254740992}}',
    );
    expect([...unsafeIntegerPaths].sort()).to.deep.equal(["/a~1b/~0", "/big", "/list/1", "/neg"]);
    expect(value["ok"]).to.equal(Number.MAX_SAFE_INTEGER);
  });

  it("does not count numbers written with a fraction or exponent as integers", () => {
    expect(parseArguments('{"a":9007199254740993.0,"b":1e20,"c":-0}').unsafeIntegerPaths.size).to.equal(0);
  });

  it("keeps a __proto__ member as data and never touches the prototype", () => {
    const { value } = parseArguments('{"__proto__":{"polluted":true},"constructor":{"prototype":{"x":1}}}');
    expect(Object.getPrototypeOf(value)).to.equal(Object.prototype);
    expect(Object.keys(value)).to.deep.equal(["__proto__", "constructor"]);
    expect(Object.getOwnPropertyDescriptor(value, "__proto__")?.value).to.deep.equal({ polluted: true });
    expect((value as Record<string, unknown>)["polluted"]).to.equal(undefined);
    expect(({} as Record<string, unknown>)["polluted"]).to.equal(undefined);
    const k = deriveKey("t", { fields: ["/__proto__/polluted"], version: 1, contextFields: [] }, parseArguments('{"__proto__":{"polluted":true}}'), RUN);
    expect(k).to.match(/^[A-Za-z0-9_-]{43}$/);
  });
});

describe("JSON pointers (RFC 6901)", () => {
  it("parses and formats pointers, escaping ~ and /", () => {
    expect(parseJsonPointer("/a~1b/c~0d/~01")).to.deep.equal(["a/b", "c~d", "~1"]);
    expect(parseJsonPointer("/")).to.deep.equal([""]);
    expect(formatJsonPointer(["a/b", "c~d", "~1"])).to.equal("/a~1b/c~0d/~01");
    expect(formatJsonPointer([])).to.equal("");
  });

  it("refuses the empty pointer, a pointer without a leading slash, and a bad ~ escape", () => {
    for (const p of ["", "a", "a/b", "/a~", "/a~2", "/\uD800"]) {
      expect(expectRefused(() => parseJsonPointer(p), "INVALID_JSON_POINTER").metadata["pointer"]).to.equal(p);
    }
  });

  it("resolves own members and decimal array indexes only", () => {
    const doc = parseArguments('{"a":[10,{"b":null}],"":1}').value;
    expect(resolveJsonPointer(doc, ["a", "1", "b"])).to.equal(null);
    expect(resolveJsonPointer(doc, ["a", "0"])).to.equal(10);
    expect(resolveJsonPointer(doc, [""])).to.equal(1);
    for (const tokens of [["a", "01"], ["a", "-"], ["a", "2"], ["a", "1e0"], ["toString"], ["a", "length"], ["a", "0", "x"]]) {
      expect(resolveJsonPointer(doc, tokens), tokens.join("/")).to.equal(undefined);
    }
  });
});

describe("argument schemas", () => {
  const schema = compileArgumentSchema(
    JSON.stringify({
      $schema: "https://json-schema.org/draft/2020-12/schema",
      type: "object",
      required: ["order_id"],
      properties: {
        order_id: { type: "string", minLength: 1 },
        placed_on: { type: "string", format: "date" },
        at: { type: "string", format: "time" },
        nonce: { type: "string", "x-keycap-volatile": true },
        customer: { $ref: "#/$defs/customer" },
        legacy: { $ref: "#/definitions/legacy" },
        order: {
          type: "object",
          properties: { id: { type: "string" }, audit: { type: "object", properties: { created: { type: "string", format: "date-time" } } } },
        },
        pair: { type: "array", prefixItems: [{ type: "string" }, { type: "string", format: "date-time" }], items: { type: "integer" } },
        tags: { type: "array", items: { type: "string" } },
        session: { type: "object", "x-keycap-volatile": true, properties: { id: { type: "string" } } },
        either: { anyOf: [{ type: "string" }, { type: "string", format: "date-time" }] },
      },
      allOf: [{ properties: { merged: { type: "integer" } } }],
      $defs: { customer: { type: "object", properties: { id: { type: "string" }, email: { type: "string", format: "email" } } } },
      definitions: { legacy: { type: "string" } },
    }),
  );
  const describeField = (p: string) => schema.describeField(parseJsonPointer(p));

  it("describes a plain defined field as defined and stable", () => {
    expect(describeField("/order_id")).to.deep.equal({ defined: true, volatile: false });
  });

  it("marks a field volatile through format date, time or date-time", () => {
    expect(describeField("/placed_on")).to.include({ defined: true, volatile: true });
    expect(describeField("/at")).to.include({ defined: true, volatile: true });
    expect(describeField("/pair/1")).to.include({ defined: true, volatile: true });
  });

  it("marks a field volatile through x-keycap-volatile, and everything below it", () => {
    expect(describeField("/nonce")).to.include({ defined: true, volatile: true });
    expect(describeField("/session/id")).to.include({ defined: true, volatile: true });
  });

  it("marks a field volatile when any descendant schema is, including conditional branches", () => {
    const order = describeField("/order");
    expect(order).to.include({ defined: true, volatile: true });
    expect(order.volatileReason).to.contain("#/properties/order/properties/audit/properties/created");
    expect(describeField("/order/id")).to.deep.equal({ defined: true, volatile: false });
    expect(describeField("/pair")).to.include({ volatile: true });
    expect(describeField("/either")).to.include({ volatile: true });
  });

  it("follows local $refs, allOf, prefixItems and items", () => {
    expect(describeField("/customer/id")).to.deep.equal({ defined: true, volatile: false });
    expect(describeField("/customer/email")).to.deep.equal({ defined: true, volatile: false });
    expect(describeField("/legacy")).to.deep.equal({ defined: true, volatile: false });
    expect(describeField("/merged")).to.deep.equal({ defined: true, volatile: false });
    expect(describeField("/pair/0")).to.deep.equal({ defined: true, volatile: false });
    expect(describeField("/pair/7")).to.deep.equal({ defined: true, volatile: false });
    expect(describeField("/tags/3")).to.deep.equal({ defined: true, volatile: false });
  });

  it("describes a field the schema does not name as undefined", () => {
    for (const p of ["/nope", "/customer/nope", "/order_id/x", "/tags/x", "/tags/01", "/constructor", "/__proto__"]) {
      expect(describeField(p).defined, p).to.equal(false);
    }
  });

  it("treats a $ref it cannot follow as volatile, since stability cannot be shown", () => {
    const s = compileArgumentSchema(
      JSON.stringify({
        type: "object",
        properties: { x: { $ref: "https://example.com/x" } },
        $defs: { x: { $id: "https://example.com/x", type: "string" } },
      }),
    );
    expect(s.describeField(["x"])).to.include({ defined: true, volatile: true });
  });

  it("survives recursive schemas", () => {
    const s = compileArgumentSchema(
      JSON.stringify({ $ref: "#/$defs/node", $defs: { node: { type: "object", properties: { id: { type: "string" }, child: { $ref: "#/$defs/node" } } } } }),
    );
    expect(s.describeField(["child", "child", "id"])).to.deep.equal({ defined: true, volatile: false });
    expect(s.describeField(["child"])).to.deep.equal({ defined: true, volatile: false });
  });

  it("validates arguments, listing violations with their instance paths", () => {
    expect(() => schema.validate(parseArguments('{"order_id":"A-1","tags":["x"]}').value)).to.not.throw();
    const e = expectRefused(() => schema.validate(parseArguments('{"tags":[1],"placed_on":"yesterday"}').value), "ARGUMENTS_SCHEMA_VIOLATION");
    expect(e.message).to.contain("order_id").and.to.contain("/tags/0").and.to.contain("/placed_on");
  });

  it("refuses an invalid schema with Ajv's reason", () => {
    const cases: [string, string][] = [
      ['{"type":"strnig"}', "type"],
      ['{"type":"object","fromat":"date-time"}', "fromat"],
      ['{"type":"object","x-keycap-volatile":"yes"}', "x-keycap-volatile"],
      ['{"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}}', "missing"],
      ['{"type":"object","properties":{"a":{"format":"no-such-format"}}}', "no-such-format"],
    ];
    for (const [text, mention] of cases) {
      const e = expectRefused(() => compileArgumentSchema(text), "INVALID_ARGUMENT_SCHEMA");
      expect(e.message, text).to.contain(mention);
    }
  });

  it("refuses schema text that is not a strict JSON object", () => {
    for (const text of ["true", "[]", "not json", '{"type":"object","type":"string"}']) {
      expectRefused(() => compileArgumentSchema(text), "INVALID_ARGUMENT_SCHEMA");
    }
  });
});
