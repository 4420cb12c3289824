// What a producer does to an event's free-form content before it is signed
// or sent: redact secrets, then move payload values over 1 KiB to blobs (in
// that order, so a blob never holds a secret). Mirrors laneledger.sdk.content.

import { isPlainObject } from "./canonical.js";
import { externalize } from "./contentref.js";
import { NotCanonicalizable } from "./errors.js";
import { redactEvent, Redactor } from "./redaction.js";

export type Event = Record<string, unknown>;

// The blob bytes an event built by makeEvent carries until submit stores
// them: beside the event, never in it, so they change neither its canonical
// bytes nor what is sent. A copy ({...event}) is the event without them.
const carried = new WeakMap<object, Map<string, Buffer>>();

export function blobsOf(event: object): Map<string, Buffer> {
  return carried.get(event) ?? new Map();
}

export function carrying<E extends object>(event: E, blobs: Map<string, Buffer>): E {
  if (blobs.size) carried.set(event, blobs);
  return event;
}

/** [event, blobs, redactions per rule]: `event` redacted and its payload
 * externalized; `event` itself when nothing changed. */
export function prepareContent(event: Event, redactor: Redactor): [Event, Map<string, Buffer>, Record<string, number>] {
  const [redacted, rules] = redactEvent(event, redactor);
  const payload = redacted["payload"];
  if (!isPlainObject(payload)) return [redacted, new Map(), rules];
  try {
    const done = externalize(payload);
    if (done.blobs.size) return [{ ...redacted, payload: done.payload }, done.blobs, rules];
  } catch (err) {
    // Not hashable as it stands: the sequencer refuses it with the path.
    if (!(err instanceof NotCanonicalizable)) throw err;
  }
  return [redacted, new Map(), rules];
}

/** `event` redacted and externalized, carrying its blobs' bytes: what to sign or send. */
export function prepared(event: Event, redactor: Redactor): Event {
  const [done, blobs] = prepareContent(event, redactor);
  return carrying(done, new Map([...blobsOf(event), ...blobs]));
}
