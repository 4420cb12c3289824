// Redaction (spec/content.md, "Redaction"): secret-shaped values are
// replaced by "[REDACTED:<rule>]" before anything is hashed, stored or sent.
// The sequencer redacts every append again; a producer that redacts exactly
// as it does keeps its local digest (and a replayed append's) equal to the
// ledger's, so this must match shared/laneledger/contract/redaction.py byte
// for byte: spec/vectors/laneledger/redaction.json holds both to that.
//
// The patterns are the sequencer's, in the forms it runs them, translated to
// JavaScript with Python's semantics: `\b`, `\w` and `\s` as Python's `re`
// reads them on str (Unicode letters and digits; Python's whitespace, which
// has U+001C..U+001F and U+0085 and not U+FEFF), atomic groups and
// possessive quantifiers as (?=(X))\k<n>, and Python's `$` (also before a
// final newline). Configured patterns (LANELEDGER_REDACT_PATTERNS) run on RE2
// in the sequencer and are not supported here: see README, "TypeScript SDK".

const W = String.raw`[\p{L}\p{N}_]`; // Python's \w on str
const S = String.raw`[\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]`; // Python's \s
const NOT_S = S.replace("[", "[^");
const B = `(?:(?<=${W})(?!${W})|(?<!${W})(?=${W}))`; // Python's \b
let groups = 0;
/** Python's (?>x) (and x++, x*+: an atomic group round a greedy one). */
function atomic(x: string): string {
  groups += 1;
  return `(?=(?<a${groups}>${x}))\\k<a${groups}>`;
}
function ci(word: string): string {
  return [...word].map((c) => `[${c.toUpperCase()}${c.toLowerCase()}]`).join("");
}

export const MARKER_PREFIX = "[REDACTED:";
const MARKER = /^\[REDACTED:[A-Za-z0-9_.-]{1,64}\]\n?$/;
export const KEY_RULE = "secret_key";

const TOKEN = "[A-Za-z0-9_-]";

/** rule -> (pattern source, replace only its `secret` group, search folded text) */
const SHAPES: [string, string, boolean][] = [
  ["pem_private_key", String.raw`-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----`, false],
  ["anthropic_api_key", String.raw`${B}sk-ant-[A-Za-z0-9_-]{20,}`, false],
  ["openai_api_key", String.raw`${B}sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}`, false],
  ["stripe_key", String.raw`${B}(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}`, false],
  ["github_token", String.raw`${B}(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})`, false],
  ["aws_access_key_id", String.raw`${B}(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}${B}`, false],
  ["google_api_key", String.raw`${B}AIza[0-9A-Za-z_-]{35}`, false],
  ["slack_token", String.raw`${B}xox[abposr]-[A-Za-z0-9-]{10,}`, false],
  // The sequencer's linear form of `\beyJ…\.eyJ…\.…` (redaction.py, _JWT_LINEAR).
  ["jwt", `(?<!${TOKEN})${atomic(`${TOKEN}*?(?=${B}eyJ${TOKEN}{5})`)}(?<secret>eyJ${atomic(`${TOKEN}{5,}`)}\\.eyJ${atomic(`${TOKEN}{5,}`)}\\.${TOKEN}{10,})`, true],
  ["bearer_token", `${B}${ci("bearer")}${S}+[A-Za-z0-9._~+/-]{16,}=*`, false],
  ["url_credentials", String.raw`(?<=:\/\/)[^/${S.slice(1, -1)}:@]+:[^/${S.slice(1, -1)}@]+@`, false],
  // The sequencer's form, run on fold_case(text) (redaction.py, _ASSIGNMENT_FOLDED).
  [
    "secret_assignment",
    String.raw`(?:a(?:pi[_-]?key|uth(?:orization)?|ccess[_-]?key)|secrets?|p(?:ass(?:words?|wd)|wd|rivate[_-]?key)|token|c(?:redentials?|ookie))` +
      atomic(`["']?`) + atomic(`${S}*`) + "[:=]" + atomic(`${S}*`) + atomic(`["']?`) + String.raw`(?!\[redacted:)` +
      `(?<secret>(?:(?:basic|bearer|token)${atomic(`${S}+`)})?${atomic(`${NOT_S.slice(0, -1)}"',;&]{6,}`)})`,
    true,
  ],
];
const FOLDED = new Set(["secret_assignment"]);

// Literal hints: a shape runs only on a text holding one (as in Python,
// where it is a speed-up that also decides: the sequencer skips a shape
// whose hint is absent). [case-insensitive, hints]
const HINTS: Record<string, [boolean, string[]]> = {
  pem_private_key: [false, ["PRIVATE KEY"]],
  anthropic_api_key: [false, ["sk-ant-"]],
  openai_api_key: [false, ["sk-"]],
  stripe_key: [false, ["_live_", "_test_"]],
  github_token: [false, ["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"]],
  aws_access_key_id: [false, ["AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA"]],
  google_api_key: [false, ["AIza"]],
  slack_token: [false, ["xox"]],
  jwt: [false, ["eyJ"]],
  bearer_token: [true, ["bearer"]],
  url_credentials: [false, ["://"]],
  secret_assignment: [true, ["key", "secret", "pass", "pwd", "token", "credential", "auth", "cookie"]],
};

interface Shape {
  name: string;
  regex: RegExp;
  group: boolean;
  marker: string;
  hint: [boolean, string[]];
}

const COMPILED: Shape[] = SHAPES.map(([name, source, group]) => ({
  name,
  regex: new RegExp(source, group ? "gud" : "gu"),
  group,
  marker: marker(name),
  hint: HINTS[name] as [boolean, string[]],
}));

/** Python's str.lower() after mapping İ ı to i and ſ to s: a character
 * matches an ASCII letter case-insensitively exactly when this maps it to
 * that letter; offsets are kept. */
export function foldCase(text: string): string {
  return text.replace(/[\u0130\u0131]/g, "i").replace(/\u017f/g, "s").toLowerCase();
}

export function marker(rule: string): string {
  return `${MARKER_PREFIX}${rule}]`;
}

export function isMarker(value: unknown): boolean {
  return typeof value === "string" && MARKER.test(value);
}

function subn(shape: Shape, text: string): [string, number] {
  shape.regex.lastIndex = 0;
  if (!shape.group) {
    let n = 0;
    const out = text.replace(shape.regex, () => {
      n += 1;
      return shape.marker;
    });
    return [out, n];
  }
  const haystack = FOLDED.has(shape.name) ? foldCase(text) : text;
  const kept: string[] = [];
  let last = 0;
  for (const match of haystack.matchAll(shape.regex)) {
    const span = match.indices?.groups?.["secret"];
    if (span === undefined) continue;
    kept.push(text.slice(last, span[0]));
    last = span[1];
  }
  if (!kept.length) return [text, 0];
  kept.push(text.slice(last));
  return [kept.join(shape.marker), kept.length - 1];
}

// -- secret keys -------------------------------------------------------------

const DEFAULT_KEY_WORDS = new Set([
  "password", "passwd", "passphrase", "pwd", "secret", "secrets", "token", "apikey", "authorization", "auth",
  "credential", "credentials", "cookie", "privatekey", "accesskey", "secretkey", "sessionkey", "clientsecret",
]);
const JOINED = new Set(["apikey", "privatekey", "accesskey", "secretkey", "sessionkey", "clientsecret"]);
const NOT_SECRET_WORDS = new Set([
  "count", "counts", "limit", "limits", "max", "min", "num", "number", "total", "usage", "used", "budget",
  "length", "len", "type", "kind", "expires", "expiry", "ttl", "url", "uri", "endpoint", "name", "required",
  "enabled", "method", "scheme", "status",
]);

export function keyWords(key: string): string[] {
  return key
    .replace(/(?<=[a-z0-9])(?=[A-Z])/g, " ")
    .split(/[^A-Za-z0-9]+/)
    .filter((w) => w)
    .map((w) => w.toLowerCase());
}

export interface Redacted<T = unknown> {
  value: T;
  count: number;
  rules: Record<string, number>;
}

/** The default rules plus extra secret key words (LANELEDGER_REDACT_KEYS). */
export class Redactor {
  readonly keyWords: Set<string>;
  private readonly keyCache = new Map<string, boolean>();

  constructor(extraKeys: Iterable<string> = []) {
    this.keyWords = new Set(DEFAULT_KEY_WORDS);
    for (const key of extraKeys) {
      const words = keyWords(key);
      if (words.length) this.keyWords.add(words.join(""));
    }
  }

  /** From the environment the services read: LANELEDGER_REDACT_KEYS
   * (comma-separated key words). LANELEDGER_REDACT_PATTERNS is refused:
   * configured patterns run on RE2 in the sequencer, which this SDK does
   * not carry, and a pattern run differently would change digests. */
  static fromEnv(env: Record<string, string | undefined> = process.env): Redactor {
    if (env["LANELEDGER_REDACT_PATTERNS"]) {
      throw new Error(
        "LANELEDGER_REDACT_PATTERNS is set: the TypeScript SDK runs only the built-in redaction rules " +
          "(configured patterns run on RE2 in the sequencer); unset it for this process",
      );
    }
    return new Redactor((env["LANELEDGER_REDACT_KEYS"] ?? "").split(",").map((k) => k.trim()).filter((k) => k));
  }

  isSecretKey(key: string): boolean {
    let found = this.keyCache.get(key);
    if (found === undefined) {
      const words = keyWords(key);
      const joined = new Set(words);
      for (let i = 0; i + 1 < words.length; i++) {
        const pair = (words[i] as string) + (words[i + 1] as string);
        if (JOINED.has(pair)) joined.add(pair);
      }
      joined.add(words.join(""));
      found = [...joined].some((w) => this.keyWords.has(w)) && !words.some((w) => NOT_SECRET_WORDS.has(w));
      if (this.keyCache.size < 4096) this.keyCache.set(key, found);
    }
    return found;
  }

  redact<T>(value: T): Redacted<T> {
    if (this.surelyClean(value)) return { value, count: 0, rules: {} };
    const rules: Record<string, number> = {};
    const out = this.walk(value, rules) as T;
    return { value: out, count: Object.values(rules).reduce((a, b) => a + b, 0), rules };
  }

  /** True when `value` surely holds no secret: no secret-named key and not
   * one hint of a shape in its strings, tested joined, once (the walk's cost
   * on a typical payload). Any doubt is false, and the walk decides. */
  surelyClean(value: unknown): boolean {
    const strings: string[] = [];
    if (!this.gather(value, strings)) return false;
    const joined = strings.join("\0");
    const lower = joined.toLowerCase();
    return !COMPILED.some(({ hint: [folded, hints] }) => hints.some((h) => (folded ? lower : joined).includes(h)));
  }

  private gather(value: unknown, strings: string[]): boolean {
    if (typeof value === "string") {
      if (value.length >= 6) strings.push(value);
      return true;
    }
    if (Array.isArray(value)) return value.every((item) => this.gather(item, strings));
    if (typeof value === "object" && value !== null) {
      for (const [key, item] of Object.entries(value)) {
        if (item === "") continue; // an empty value is kept under any key
        if (!this.gather(item, strings)) return false;
        if ((typeof item === "string" || (typeof item === "object" && item !== null)) && this.isSecretKey(key)) return false;
      }
      return true;
    }
    return value === null || typeof value === "number" || typeof value === "boolean";
  }

  redactText(text: string, rules: Record<string, number> = {}): string {
    // No rule matches fewer than 6 characters (code points: 12 code units are surely 6).
    if ((text.length < 12 && [...text].length < 6) || isMarker(text)) return text;
    const lower = text.toLowerCase(); // of the text as given, as the sequencer does
    for (const shape of COMPILED) {
      const [folded, hints] = shape.hint;
      const haystack = folded ? lower : text;
      if (!hints.some((h) => haystack.includes(h))) continue;
      const [out, n] = subn(shape, text);
      text = out;
      if (n) rules[shape.name] = (rules[shape.name] ?? 0) + n;
    }
    return text;
  }

  private walk(value: unknown, rules: Record<string, number>): unknown {
    if (typeof value === "string") return this.redactText(value, rules);
    if (Array.isArray(value)) return value.map((item) => this.walk(item, rules));
    if (typeof value === "object" && value !== null) {
      return Object.fromEntries(
        Object.entries(value).map(([key, item]) => {
          if ((typeof item === "string" || (typeof item === "object" && item !== null)) && !isMarker(item) && item !== "" && this.isSecretKey(key)) {
            rules[KEY_RULE] = (rules[KEY_RULE] ?? 0) + 1;
            return [key, marker(KEY_RULE)];
          }
          return [key, this.walk(item, rules)];
        }),
      );
    }
    return value; // numbers, booleans, null: never a secret by shape
  }
}

export const REDACTED_FIELDS = ["payload", "extensions"] as const;

/** The event with its payload and extensions redacted, and the count per
 * rule; the event itself when nothing was secret. */
export function redactEvent<E extends Record<string, unknown>>(event: E, redactor: Redactor): [E, Record<string, number>] {
  const rules: Record<string, number> = {};
  let out = event;
  for (const name of REDACTED_FIELDS) {
    const value = event[name];
    if (value === undefined || value === null) continue;
    const done = redactor.redact(value);
    if (done.count) {
      if (out === event) out = { ...event };
      (out as Record<string, unknown>)[name] = done.value;
      for (const [rule, n] of Object.entries(done.rules)) rules[rule] = (rules[rule] ?? 0) + n;
    }
  }
  return [out, rules];
}
