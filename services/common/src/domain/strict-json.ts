/**
 * Strict JSON for a tool call's recorded arguments.
 *
 * The kernel derives idempotency keys from these arguments, so any input that a
 * lenient parser would silently collapse into another value (a duplicate member
 * where the last one wins, an integer rounded to the nearest double, a lone
 * surrogate replaced by U+FFFD) would let two different calls share one key.
 * This parser refuses such input instead of guessing.
 *
 * Why hand-written: no JSON library gives, in one pass, refusal of duplicate
 * member names, the provenance of integers that a double cannot hold, and a
 * depth limit enforced while parsing (JSON.parse has none of the three; a
 * reviver sees values only after they were rounded and duplicates dropped).
 *
 * Grammar: RFC 8259 exactly (no BOM, comments, trailing commas, leading zeros,
 * single quotes or non-JSON whitespace), with the I-JSON (RFC 7493) rules on
 * top: strings and member names must be well-formed Unicode, numbers must be
 * finite IEEE 754 doubles, member names must be unique.
 */
import { type KeycapError } from "../errors";
import { formatJsonPointer } from "./json-pointer";
import { Reasons, refuse } from "../refuse";

/** A JSON value as the parser returns it. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [k: string]: JsonValue };

/** A JSON object (the only shape tool arguments may have). */
export type JsonObject = { [k: string]: JsonValue };

/** Size limits applied before and while parsing. */
export interface JsonLimits {
  /** Largest accepted input, in bytes of its UTF-8 encoding. */
  maxBytes: number;
  /**
   * Deepest accepted nesting of containers (objects and arrays); the top-level
   * object is depth 1. Scalars do not add depth.
   */
  maxDepth: number;
}

/** keycap's default limits: 64 KiB of UTF-8, 32 levels of nesting. */
export const DEFAULT_JSON_LIMITS: JsonLimits = { maxBytes: 65536, maxDepth: 32 };

/**
 * Ceiling on a configured `maxDepth`. The parser recurses once per container,
 * so the ceiling keeps a misconfigured limit from turning into a stack overflow.
 */
export const MAX_CONFIGURABLE_DEPTH = 1000;

/** Arguments that parsed strictly, with what the parser learned on the way. */
export interface ParsedArguments {
  /** The arguments object. Member names such as `__proto__` are ordinary own data properties. */
  value: JsonObject;
  /**
   * RFC 6901 pointers of every number written with integer syntax (no fraction,
   * no exponent) whose magnitude exceeds 2^53-1: `value` holds it rounded, so it
   * must not identify anything (see key derivation).
   */
  unsafeIntegerPaths: ReadonlySet<string>;
}

/** The result of parsing any JSON text strictly (not necessarily an object). */
export interface ParsedJson {
  value: JsonValue;
  unsafeIntegerPaths: ReadonlySet<string>;
}

/**
 * Parses a call's `arguments_json` strictly. The text must be one JSON object.
 *
 * @throws KeycapError (INVALID_ARGUMENT) with reason `ARGUMENTS_TOO_LARGE`,
 *   `ARGUMENTS_NOT_JSON`, `ARGUMENTS_NOT_OBJECT`, `ARGUMENTS_DUPLICATE_MEMBER`,
 *   `ARGUMENTS_TOO_DEEP`, `ARGUMENTS_NON_FINITE_NUMBER` or `ARGUMENTS_INVALID_UNICODE`.
 * @throws RangeError when `limits` themselves are invalid (a programming error, not bad input).
 *
 * @example
 * const { value, unsafeIntegerPaths } = parseArguments('{"order_id":"A-17","amount":12.5}');
 */
export function parseArguments(text: string, limits: JsonLimits = DEFAULT_JSON_LIMITS): ParsedArguments {
  const parsed = parseStrictJson(text, limits);
  const value = parsed.value;
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw refuse(Reasons.ARGUMENTS_NOT_OBJECT, `arguments must be a JSON object, got ${describeType(value)}`, { field: "" });
  }
  return { value, unsafeIntegerPaths: parsed.unsafeIntegerPaths };
}

/**
 * Parses any JSON text with the same strict rules as {@link parseArguments}
 * (used for documents that are not call arguments, such as argument schemas).
 * Refusals carry the same `ARGUMENTS_*` reasons, with `subject` naming the
 * text in messages; callers that parse something else rewrap the reason.
 */
export function parseStrictJson(text: string, limits: JsonLimits = DEFAULT_JSON_LIMITS, subject = "arguments"): ParsedJson {
  checkLimits(limits);
  // Every UTF-16 code unit costs at least one UTF-8 byte and at most three,
  // so the exact byte count is needed only in between.
  if (text.length > limits.maxBytes || (text.length * 3 > limits.maxBytes && Buffer.byteLength(text, "utf8") > limits.maxBytes)) {
    const bytes = Buffer.byteLength(text, "utf8");
    throw refuse(Reasons.ARGUMENTS_TOO_LARGE, `${subject} are ${bytes} bytes of UTF-8; the limit is ${limits.maxBytes}`, {
      bytes: String(bytes),
      limit: String(limits.maxBytes),
    });
  }
  const parser = new Parser(text, limits.maxDepth, subject);
  const value = parser.parseDocument();
  return { value, unsafeIntegerPaths: parser.unsafeIntegerPaths };
}

function checkLimits(limits: JsonLimits): void {
  if (!Number.isSafeInteger(limits.maxBytes) || limits.maxBytes < 1) {
    throw new RangeError(`JsonLimits.maxBytes must be a positive integer, got ${limits.maxBytes}`);
  }
  if (!Number.isSafeInteger(limits.maxDepth) || limits.maxDepth < 1 || limits.maxDepth > MAX_CONFIGURABLE_DEPTH) {
    throw new RangeError(`JsonLimits.maxDepth must be an integer in 1..${MAX_CONFIGURABLE_DEPTH}, got ${limits.maxDepth}`);
  }
}

function describeType(value: JsonValue): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return `a ${typeof value}`;
}

// A lone surrogate, and only a lone one: with the `u` flag a valid pair is a
// single code point outside this class.
const LONE_SURROGATE = /[\uD800-\uDFFF]/u;

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/** Character codes the grammar names. */
const enum C {
  Tab = 0x09,
  Lf = 0x0a,
  Cr = 0x0d,
  Space = 0x20,
  Quote = 0x22,
  Plus = 0x2b,
  Comma = 0x2c,
  Minus = 0x2d,
  Dot = 0x2e,
  Slash = 0x2f,
  Zero = 0x30,
  Nine = 0x39,
  Colon = 0x3a,
  UpperE = 0x45,
  LBracket = 0x5b,
  Backslash = 0x5c,
  RBracket = 0x5d,
  LowerE = 0x65,
  LBrace = 0x7b,
  RBrace = 0x7d,
  Bom = 0xfeff,
}

class Parser {
  private pos = 0;
  /** Member names / indexes from the top-level value down to the current one. */
  private readonly path: string[] = [];
  readonly unsafeIntegerPaths = new Set<string>();

  constructor(
    private readonly text: string,
    private readonly maxDepth: number,
    /** What the text is, for messages ("arguments"); plural, as in "... are not valid JSON". */
    private readonly subject: string,
  ) {}

  parseDocument(): JsonValue {
    if (this.text.charCodeAt(0) === C.Bom) {
      // RFC 8259 §8.1: senders MUST NOT add a BOM. Ignoring it would make two
      // different texts one call; refusing keeps the recorded text canonical.
      throw this.notJson("a byte order mark (U+FEFF) is not allowed", 0);
    }
    this.skipWhitespace();
    const value = this.parseValue(1);
    this.skipWhitespace();
    if (this.pos < this.text.length) throw this.unexpected("end of input");
    return value;
  }

  private parseValue(depth: number): JsonValue {
    const c = this.text.charCodeAt(this.pos);
    switch (c) {
      case C.LBrace:
        return this.parseObject(depth);
      case C.LBracket:
        return this.parseArray(depth);
      case C.Quote:
        return this.parseString("string");
      case 0x74: // t
        return this.parseLiteral("true", true);
      case 0x66: // f
        return this.parseLiteral("false", false);
      case 0x6e: // n
        return this.parseLiteral("null", null);
      default:
        if (c === C.Minus || (c >= C.Zero && c <= C.Nine)) return this.parseNumber();
        throw this.unexpected("a JSON value");
    }
  }

  private parseObject(depth: number): JsonObject {
    this.enter(depth);
    this.pos++; // {
    const object: JsonObject = {};
    this.skipWhitespace();
    if (this.text.charCodeAt(this.pos) === C.RBrace) {
      this.pos++;
      return object;
    }
    for (;;) {
      if (this.text.charCodeAt(this.pos) !== C.Quote) throw this.unexpected("a member name (a string)");
      const namePos = this.pos;
      const name = this.parseString("member name");
      if (Object.hasOwn(object, name)) {
        const at = formatJsonPointer(this.path);
        const field = formatJsonPointer([...this.path, name]);
        throw refuse(
          Reasons.ARGUMENTS_DUPLICATE_MEMBER,
          `${this.subject}: member ${JSON.stringify(name)} appears more than once in the object at ${at === "" ? "the top level" : at} ` +
            `(${this.where(namePos)}); duplicate member names are refused because parsers disagree on which one wins`,
          { field, member: name, offset: String(namePos) },
        );
      }
      this.skipWhitespace();
      if (this.text.charCodeAt(this.pos) !== C.Colon) throw this.unexpected("':' after a member name");
      this.pos++;
      this.skipWhitespace();
      this.path.push(name);
      const value = this.parseValue(depth + 1);
      this.path.pop();
      if (name === "__proto__") {
        // Plain assignment would call the Object.prototype setter and replace
        // the object's prototype; the member must stay data.
        Object.defineProperty(object, name, { value, enumerable: true, writable: true, configurable: true });
      } else {
        object[name] = value;
      }
      this.skipWhitespace();
      const c = this.text.charCodeAt(this.pos);
      if (c === C.Comma) {
        this.pos++;
        this.skipWhitespace();
        continue;
      }
      if (c === C.RBrace) {
        this.pos++;
        return object;
      }
      throw this.unexpected("',' or '}'");
    }
  }

  private parseArray(depth: number): JsonValue[] {
    this.enter(depth);
    this.pos++; // [
    const array: JsonValue[] = [];
    this.skipWhitespace();
    if (this.text.charCodeAt(this.pos) === C.RBracket) {
      this.pos++;
      return array;
    }
    for (;;) {
      this.path.push(String(array.length));
      array.push(this.parseValue(depth + 1));
      this.path.pop();
      this.skipWhitespace();
      const c = this.text.charCodeAt(this.pos);
      if (c === C.Comma) {
        this.pos++;
        this.skipWhitespace();
        continue;
      }
      if (c === C.RBracket) {
        this.pos++;
        return array;
      }
      throw this.unexpected("',' or ']'");
    }
  }

  /** Refuses a container past the depth limit before descending into it. */
  private enter(depth: number): void {
    if (depth > this.maxDepth) {
      const at = formatJsonPointer(this.path);
      throw refuse(Reasons.ARGUMENTS_TOO_DEEP, `${this.subject} nest deeper than ${this.maxDepth} levels at ${at} (${this.where(this.pos)})`, {
        field: at,
        limit: String(this.maxDepth),
        offset: String(this.pos),
      });
    }
  }

  private parseString(what: "string" | "member name"): string {
    const text = this.text;
    const start = this.pos;
    this.pos++; // opening quote
    let out = "";
    let chunkStart = this.pos;
    let sawSurrogate = false;
    for (;;) {
      if (this.pos >= text.length) throw this.notJson(`unterminated ${what}`, start);
      const c = text.charCodeAt(this.pos);
      if (c === C.Quote) {
        out += text.slice(chunkStart, this.pos);
        this.pos++;
        break;
      }
      if (c === C.Backslash) {
        out += text.slice(chunkStart, this.pos);
        const unit = this.parseEscape();
        if (unit >= 0xd800 && unit <= 0xdfff) sawSurrogate = true;
        out += String.fromCharCode(unit);
        chunkStart = this.pos;
        continue;
      }
      if (c < C.Space) throw this.notJson(`control character U+${hex4(c)} must be escaped in a ${what}`, this.pos);
      if (c >= 0xd800 && c <= 0xdfff) sawSurrogate = true;
      this.pos++;
    }
    // I-JSON §2.1: strings must be well-formed Unicode. Checked on the decoded
    // text so that an escaped pair (\uD83D\uDE00) is accepted and a lone
    // escaped half is not.
    if (sawSurrogate && LONE_SURROGATE.test(out)) {
      const at = formatJsonPointer(this.path);
      throw refuse(
        Reasons.ARGUMENTS_INVALID_UNICODE,
        `${this.subject}: the ${what} at ${at === "" ? "the top level" : at} (${this.where(start)}) contains a lone surrogate; ` +
          "strings must be well-formed Unicode (I-JSON, RFC 7493)",
        { field: at, offset: String(start) },
      );
    }
    return out;
  }

  /** Reads one escape sequence (the backslash is at `pos`) and returns the UTF-16 code unit it denotes. */
  private parseEscape(): number {
    const escapePos = this.pos;
    const c = this.text.charCodeAt(this.pos + 1);
    this.pos += 2;
    switch (c) {
      case C.Quote:
        return C.Quote;
      case C.Backslash:
        return C.Backslash;
      case C.Slash:
        return C.Slash;
      case 0x62: // b
        return 0x08;
      case 0x66: // f
        return 0x0c;
      case 0x6e: // n
        return C.Lf;
      case 0x72: // r
        return C.Cr;
      case 0x74: // t
        return C.Tab;
      case 0x75: {
        // u
        let unit = 0;
        for (let i = 0; i < 4; i++) {
          const d = hexValue(this.text.charCodeAt(this.pos + i));
          if (d < 0) throw this.notJson("\\u must be followed by four hexadecimal digits", escapePos);
          unit = unit * 16 + d;
        }
        this.pos += 4;
        return unit;
      }
      default:
        throw this.notJson("invalid escape sequence", escapePos);
    }
  }

  private parseNumber(): number {
    const text = this.text;
    const start = this.pos;
    let integerSyntax = true;
    if (text.charCodeAt(this.pos) === C.Minus) this.pos++;
    const first = text.charCodeAt(this.pos);
    if (first === C.Zero) {
      this.pos++;
      if (isDigit(text.charCodeAt(this.pos))) throw this.notJson("leading zeros are not allowed in numbers", start);
    } else if (isDigit(first)) {
      this.skipDigits();
    } else {
      throw this.unexpected("a digit");
    }
    if (text.charCodeAt(this.pos) === C.Dot) {
      integerSyntax = false;
      this.pos++;
      if (!isDigit(text.charCodeAt(this.pos))) throw this.unexpected("a digit after '.'");
      this.skipDigits();
    }
    const e = text.charCodeAt(this.pos);
    if (e === C.LowerE || e === C.UpperE) {
      integerSyntax = false;
      this.pos++;
      const sign = text.charCodeAt(this.pos);
      if (sign === C.Plus || sign === C.Minus) this.pos++;
      if (!isDigit(text.charCodeAt(this.pos))) throw this.unexpected("a digit in the exponent");
      this.skipDigits();
    }
    const literal = text.slice(start, this.pos);
    // Number() on this (already validated) syntax rounds to the nearest double,
    // exactly as JSON.parse does.
    const value = Number(literal);
    if (!Number.isFinite(value)) {
      const at = formatJsonPointer(this.path);
      throw refuse(
        Reasons.ARGUMENTS_NON_FINITE_NUMBER,
        `${this.subject}: the number ${abbreviate(literal)} at ${at} (${this.where(start)}) is outside the range of an IEEE 754 double; ` +
          "numbers must be finite (I-JSON, RFC 7493)",
        { field: at, offset: String(start) },
      );
    }
    // Any integer above 2^53-1 rounds to a double >= 2^53, so comparing the
    // rounded value is exact. Recorded, not refused: only a key field holding
    // one is an error (an unrelated field may carry, say, a 64-bit id).
    if (integerSyntax && (value > MAX_SAFE || value < -MAX_SAFE)) {
      this.unsafeIntegerPaths.add(formatJsonPointer(this.path));
    }
    return value;
  }

  private skipDigits(): void {
    while (isDigit(this.text.charCodeAt(this.pos))) this.pos++;
  }

  private parseLiteral<T extends boolean | null>(word: string, value: T): T {
    if (!this.text.startsWith(word, this.pos)) throw this.unexpected("a JSON value");
    this.pos += word.length;
    return value;
  }

  /** RFC 8259 §2: only space, tab, line feed and carriage return. */
  private skipWhitespace(): void {
    const text = this.text;
    for (;;) {
      const c = text.charCodeAt(this.pos);
      if (c === C.Space || c === C.Lf || c === C.Cr || c === C.Tab) this.pos++;
      else return;
    }
  }

  private unexpected(expected: string): KeycapError {
    if (this.pos >= this.text.length) return this.notJson(`unexpected end of input, expected ${expected}`, this.pos);
    const cp = this.text.codePointAt(this.pos) ?? 0;
    const shown = cp >= 0x20 && cp < 0x7f ? `'${String.fromCodePoint(cp)}'` : `U+${hex4(cp)}`;
    return this.notJson(`unexpected ${shown}, expected ${expected}`, this.pos);
  }

  private notJson(problem: string, offset: number): KeycapError {
    return refuse(Reasons.ARGUMENTS_NOT_JSON, `${this.subject} are not valid JSON: ${problem} (${this.where(offset)})`, {
      offset: String(offset),
    });
  }

  /** "line L, column C, offset N" — columns and offsets count UTF-16 code units, from 1 and 0. */
  private where(offset: number): string {
    let line = 1;
    let lineStart = 0;
    for (let i = 0; i < offset && i < this.text.length; i++) {
      if (this.text.charCodeAt(i) === C.Lf) {
        line++;
        lineStart = i + 1;
      }
    }
    return `line ${line}, column ${offset - lineStart + 1}, offset ${offset}`;
  }
}

function isDigit(c: number): boolean {
  return c >= C.Zero && c <= C.Nine;
}

function hexValue(c: number): number {
  if (c >= 0x30 && c <= 0x39) return c - 0x30;
  if (c >= 0x41 && c <= 0x46) return c - 0x37;
  if (c >= 0x61 && c <= 0x66) return c - 0x57;
  return -1;
}

function hex4(c: number): string {
  return c.toString(16).toUpperCase().padStart(4, "0");
}

function abbreviate(s: string): string {
  return s.length <= 40 ? s : `${s.slice(0, 37)}...`;
}
