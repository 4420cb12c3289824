// How a LangGraph.js checkpoint is stored in laneledger: the keys, ids,
// formats and events of spec/langgraph.md, the same as the Python saver's
// (laneledger.adapters.langgraph_records). Pure functions: no I/O.

import { InvalidRequest } from "./errors.js";
import { derivedId } from "./ids.js";
import type { Redactor } from "./redaction.js";

export const CHECKPOINT_FORMAT = "application/vnd.langgraph.checkpoint+json;version=1";
export const WRITES_FORMAT = "application/vnd.langgraph.writes+json;version=1";

export const CHECKPOINT_EVENT = "lane.framework.langgraph.checkpoint";
export const WRITES_EVENT = "lane.framework.langgraph.writes";
export const ERASED_EVENT = "lane.framework.langgraph.erased";

export const ROOT_LANE = "main"; // the lane of the root namespace ""
export const DEFAULT_RUN = "langgraph"; // the run of checkpoints whose metadata names none
export const KEY_PREFIX = "langgraph/"; // every key the saver writes starts so
const MAX_ID_LENGTH = 256;

/** Python's `quote(text, safe="")`: everything but `A-Za-z0-9_.-~` percent-encoded. */
export function quote(text: string): string {
  return encodeURIComponent(text).replace(/[!'()*]/g, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());
}

function checkedKey(key: string, what: string): string {
  if (key.length > MAX_ID_LENGTH) {
    throw new InvalidRequest(`the ${what} makes a checkpoint key of ${key.length} characters, over ${MAX_ID_LENGTH}`, {
      path: "$.configurable", key_length: key.length, limit: MAX_ID_LENGTH,
    });
  }
  return key;
}

export function threadKey(threadId: string): string {
  return checkedKey(KEY_PREFIX + quote(threadId), "thread_id");
}

export function nsKey(threadId: string, checkpointNs: string): string {
  return checkedKey(threadKey(threadId) + "/ns/" + quote(checkpointNs), "checkpoint_ns");
}

/** The laneledger checkpoint id of one LangGraph checkpoint. */
export function recordId(threadId: string, checkpointNs: string, checkpointId: string): string {
  return derivedId(["langgraph", threadId, checkpointNs, checkpointId]);
}

/** From what a revision listing shows (its key and id), without its state. */
export function writesKeyOf(namespaceKey: string, record: string): string {
  return namespaceKey + "/writes/" + record;
}

export function laneName(checkpointNs: string): string {
  return checkpointNs || ROOT_LANE;
}

// -- typed values as JSON: [type, lowercase hex] (no default redaction rule matches hex text)

export type TypedJson = [string, string];

export function typedJson([type, data]: [string, Uint8Array]): TypedJson {
  return [type, Buffer.from(data).toString("hex")];
}

export function jsonTyped(value: unknown, path: string): [string, Uint8Array] {
  if (!Array.isArray(value) || value.length !== 2 || typeof value[0] !== "string" || typeof value[1] !== "string" || !/^(?:[0-9a-f]{2})*$/.test(value[1])) {
    throw new InvalidRequest("a stored LangGraph value is not [type, hex]", { path });
  }
  return [value[0], Buffer.from(value[1], "hex")];
}

/** A field of a stored record, of the type the saver wrote. */
export function field<T>(state: Record<string, unknown>, name: string, check: (v: unknown) => v is T, what: string, path: string): T {
  const value = state[name];
  if (!check(value)) throw new InvalidRequest(`a stored LangGraph record has no ${what} ${JSON.stringify(name)}`, { path: `${path}.${name}` });
  return value;
}

export const isString = (v: unknown): v is string => typeof v === "string";

/** A list field whose items are lists of `width` values. */
export function rows(state: Record<string, unknown>, name: string, width: number, path: string): unknown[][] {
  const items = field(state, name, Array.isArray, "list", path) as unknown[];
  items.forEach((item, i) => {
    if (!Array.isArray(item) || item.length !== width) {
      throw new InvalidRequest(`a stored LangGraph record's ${name} holds other than ${width}-item lists`, { path: `${path}.${name}[${i}]` });
    }
  });
  return items as unknown[][];
}

/** Serde output with its secrets replaced, before it becomes hex no rule
 * can see into: LangGraph.js's serde writes JSON (messages as LangChain's
 * constructor form), which is redacted as any JSON document is and
 * re-encoded only when something was replaced; bytes are kept as they are. */
export function redactTyped([type, data]: [string, Uint8Array], redactor: Redactor): [string, Uint8Array] {
  if (type !== "json") return [type, data];
  const text = Buffer.from(data).toString("utf8");
  const parsed: unknown = JSON.parse(text);
  const done = redactor.redact(parsed);
  return done.count ? [type, Buffer.from(JSON.stringify(done.value), "utf8")] : [type, data];
}
