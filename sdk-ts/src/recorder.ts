// Building events and writing one lane safely. Mirrors LaneRecorder and
// make_event in laneledger.sdk.client.

import type { AppendCommitted, AppendHandle, Lane, LedgerClient } from "./client.js";
import { blobsOf, carrying, prepared, type Event } from "./content.js";
import { LedgerError } from "./errors.js";
import { newId, now } from "./ids.js";
import { Redactor } from "./redaction.js";
import { signEvent } from "./signing.js";
import type { KeyObject } from "node:crypto";

export const SCHEMA_VERSION = "1.0";

export interface EventFields {
  actorId: string;
  subjectId?: string;
  payload?: Record<string, unknown>;
  causationId?: string;
  extensions?: Record<string, unknown>;
  occurredAt?: string;
  eventId?: string;
  /** Whose personal data the event holds: a pseudonymous id an erasure finds it by (spec/erasure.md). */
  dataSubject?: string;
  /** The actor's ed25519 key: the event is signed (after redaction and externalization). */
  privateKey?: KeyObject;
}

/** A proposed event with a fresh UUIDv7 id, its content redacted and its
 * payload values over 1 KiB externalized (their bytes carried beside it
 * until submit stores them). */
export function makeEvent(laneId: string, eventType: string, fields: EventFields, redactor: Redactor): Event {
  const event: Event = {
    schema_version: SCHEMA_VERSION,
    id: fields.eventId ?? newId(),
    lane_id: laneId,
    subject_id: fields.subjectId ?? laneId,
    event_type: eventType,
    actor_id: fields.actorId,
    occurred_at: fields.occurredAt ?? now(),
    payload: { ...(fields.payload ?? {}) },
    extensions: { ...(fields.extensions ?? {}) },
  };
  if (fields.causationId !== undefined) event["causation_id"] = fields.causationId;
  if (fields.dataSubject !== undefined) event["data_subject"] = fields.dataSubject;
  // Redact and externalize before signing: the signature covers what is sent.
  const done = prepared(event, redactor);
  return fields.privateKey === undefined ? done : signEvent(done, fields.privateKey);
}

/** Writes one lane: serializes its appends, tracks the head (optimistic
 * concurrency: each append expects the head it knows) and advances it only
 * on a newer receipt. `wait: "accept"` returns once JetStream has the append,
 * assuming it commits (the recorder is the lane's only writer); `flush()`
 * then awaits every outstanding receipt and reloads the head on a rejection. */
export class LaneRecorder {
  head: number;
  private queue: Promise<unknown> = Promise.resolve();
  private outstanding: AppendHandle[] = [];

  /** actor id -> private key: events of these actors are signed on append. */
  readonly signers: Map<string, KeyObject>;
  /** Named on every event appended that names none (spec/erasure.md). */
  readonly dataSubject: string | undefined;

  constructor(
    readonly client: LedgerClient,
    public lane: Lane,
    opts: { signers?: Map<string, KeyObject>; dataSubject?: string } = {},
  ) {
    this.head = lane.last_seq;
    this.signers = new Map(opts.signers ?? []);
    this.dataSubject = opts.dataSubject;
  }

  /** Create the lane (idempotent by session, run and name) and resume its head. */
  static async open(
    client: LedgerClient, tenant: string, sessionId: string, runId: string, name: string,
    opts: { kind?: string; parentLaneId?: string; actorId?: string; signers?: Map<string, KeyObject>; dataSubject?: string } = {},
  ): Promise<LaneRecorder> {
    const { signers, dataSubject, ...fields } = opts;
    const lane = await client.createLane(tenant, sessionId, runId, name, fields);
    const resumed = await client.getLane(lane.id, { tenant: lane.tenant });
    return new LaneRecorder(client, resumed, { ...(signers ? { signers } : {}), ...(dataSubject !== undefined ? { dataSubject } : {}) });
  }

  /** makeEvent on this lane, signed when `actorId` is one of the signers,
   * naming the recorder's data subject unless told another. */
  event(eventType: string, fields: EventFields): Event {
    const privateKey = fields.privateKey ?? this.signers.get(fields.actorId);
    const dataSubject = fields.dataSubject ?? this.dataSubject;
    return makeEvent(
      this.lane.id, eventType,
      { ...fields, ...(privateKey ? { privateKey } : {}), ...(dataSubject !== undefined ? { dataSubject } : {}) },
      this.client.redactor,
    );
  }

  /** The recorder's data subject on an event that names none, before it is signed. */
  private subject(event: Event): Event {
    if (this.dataSubject === undefined || "data_subject" in event) return event;
    return carrying({ ...event, data_subject: this.dataSubject }, blobsOf(event)); // the blobs stay with it
  }

  private signed(event: Event): Event {
    const key = this.signers.get(String(event["actor_id"]));
    return key !== undefined && !("signature" in event) ? signEvent(event, key) : event;
  }

  /** `retries`: transport failures retried with the same append id (wait "commit"). */
  append(events: Event[], opts: { appendId?: string; wait?: "commit"; retries?: number }): Promise<AppendCommitted>;
  append(events: Event[], opts: { appendId?: string; wait: "accept" }): Promise<AppendHandle>;
  append(events: Event[]): Promise<AppendCommitted>;
  append(events: Event[], opts: { appendId?: string; wait?: "commit" | "accept"; retries?: number } = {}): Promise<AppendCommitted | AppendHandle> {
    // Content first (redact, externalize), then sign what will be sent; an
    // event signed already is left to submit's check.
    const ready = events.map((event) => ("signature" in event ? event : this.signed(this.subject(prepared(event, this.client.redactor)))));
    return this.serially(async () => {
      if (opts.wait === "accept") {
        const handle = await this.client.submit(this.lane, this.head, ready, { ...(opts.appendId ? { appendId: opts.appendId } : {}) });
        this.head += ready.length;
        this.outstanding.push(handle);
        return handle;
      }
      const receipt = await this.client.append(this.lane, this.head, ready, {
        ...(opts.appendId ? { appendId: opts.appendId } : {}),
        ...(opts.retries !== undefined ? { retries: opts.retries } : {}),
      });
      this.head = Math.max(this.head, receipt.last_seq);
      return receipt;
    });
  }

  flush(): Promise<AppendCommitted[]> {
    return this.serially(async () => {
      const handles = this.outstanding;
      this.outstanding = [];
      const receipts: AppendCommitted[] = [];
      try {
        for (const handle of handles) receipts.push(await handle.receipt());
      } catch (err) {
        if (err instanceof LedgerError) await this.reload();
        throw err;
      }
      return receipts;
    });
  }

  async reload(): Promise<number> {
    this.lane = await this.client.getLane(this.lane.id, { tenant: this.lane.tenant });
    this.head = this.lane.last_seq;
    return this.head;
  }

  private serially<T>(step: () => Promise<T>): Promise<T> {
    const run = this.queue.then(step, step);
    this.queue = run.catch(() => undefined);
    return run;
  }
}
