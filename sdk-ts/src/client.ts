// The client: commands (ensure actors, lanes, turns, actions, attempts),
// appends with receipts, and blobs. Mirrors laneledger.sdk.client.
//
// An append is published to JetStream (the PubAck means "durably
// accepted"); the sequencer answers on the client's inbox with a JSON array
// of receipts (spec/wire.md, "Receipts"), matched here by append id.
// Resending the same append id is always safe: a replay gets the original
// receipt, marked "replayed".

import { connect, createInbox, headers as natsHeaders, type Msg, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import { jetstream, JetStreamApiError, type JetStreamClient } from "@nats-io/jetstream";
import { Objm, type ObjectStore } from "@nats-io/obj";

import { isPlainObject } from "./canonical.js";
import { GENESIS_HASH } from "./chain.js";
import { refsIn } from "./contentref.js";
import { blobsOf, prepareContent, type Event } from "./content.js";
import {
  BlobMissing, EntityNotFound, errorFromWire, InvalidRequest, IntegrityError, LedgerError, LedgerTimeout, LedgerUnavailable,
  QuotaExceeded, RequestTooLarge, TransportError, type ErrorBody,
} from "./errors.js";
import { newId } from "./ids.js";
import { Redactor } from "./redaction.js";
import { publicKeyHex } from "./signing.js";
import type { KeyObject } from "node:crypto";
import { inboxPrefix, objectName, REPLY_HEADER, Subjects, TENANT_JS_API_PREFIX, tenantHeaders } from "./subjects.js";

export const MAX_REQUEST_BYTES = 1024 * 1024;
const NO_RESPONDERS_GRACE_MS = 1000; // a command is asked again this long while no sequencer subscribes
const STORE_FAILED = 10077; // JetStream: a stream at its limits refused the publish

export interface Lane {
  id: string;
  tenant: string;
  session_id: string;
  run_id: string;
  name: string;
  kind: string;
  parent_lane_id?: string | null;
  actor_id?: string | null;
  created_at: string;
  last_seq: number;
  head_hash: string;
}
export interface Actor { id: string; tenant: string; key: string; kind: string; display_name?: string | null; attributes?: Record<string, unknown>; public_key?: string | null; created_at: string }
export interface Turn { id: string; lane_id: string; turn_no: number; created_at: string }
export interface Action { id: string; lane_id: string; turn_id: string; action_type: string; name: string; effect: string; idempotency: string; idempotency_key?: string | null; created_at: string }
export interface Attempt { id: string; lane_id: string; action_id: string; attempt_no: number; created_at: string }
export type CommittedEvent = Record<string, unknown>;
export interface LanePage { lane: Lane; events: CommittedEvent[]; has_more: boolean }
export interface StructureCursor { lanes: number; turns: number; actions: number; attempts: number }
export interface Structure { session_id: string; tenant: string; run_id?: string | null; lanes: Lane[]; turns: Turn[]; actions: Action[]; attempts: Attempt[] }
export interface StructurePage extends Structure { next: StructureCursor; has_more: boolean }
export interface EventsPage { session_id: string; tenant: string; run_id?: string | null; events: CommittedEvent[]; next_position: number; has_more: boolean }
/** A session (or run) whole: its structure and every event, read page by page. */
export interface SessionView extends Structure { run_ids: string[]; events: CommittedEvent[] }

/** What an erased event names: the erasure event that erased it (spec/erasure.md). */
export interface ErasureMark { position: number; event_id: string }
/** What one `erase` request did (spec/erasure.md). `erasure`: the erasure
 * event's mark (null on a dry run of an erasure not yet committed).
 * `erased`: events erased now; `already_erased` and `unsealed` (committed
 * before sealing: they cannot be erased) were left as they were. Ask again
 * from `next_after_position` while `has_more`. */
export interface ErasurePage {
  erasure_id: string;
  erasure: ErasureMark | null;
  erased: number;
  already_erased: number;
  unsealed: number;
  has_more: boolean;
  next_after_position: number;
  dry_run: boolean;
}
/** One request of an erasure: its scope (a session, or one run of it; a data
 * subject; or, retention, every event of the tenant committed before a
 * time), who asks (`actorId`, an actor of the tenant) and why (`reason`,
 * kept forever: no personal data in it). */
export interface ErasePageOptions {
  sessionId?: string;
  runId?: string;
  dataSubject?: string;
  committedBefore?: string;
  actorId: string;
  reason: string;
  erasureId: string;
  afterPosition?: number;
  limit?: number;
  dryRun?: boolean;
  tenant?: string;
}
/** A whole erasure: a fresh `erasureId` unless given; `maxPages`, `budgetMs`:
 * stop after that many pages, or once that long has passed. */
export interface EraseOptions extends Omit<ErasePageOptions, "erasureId"> { erasureId?: string; maxPages?: number; budgetMs?: number }

export interface AppendCommitted {
  outcome: "committed";
  append_id: string;
  lane_id: string;
  digest: string;
  first_seq: number;
  last_seq: number;
  event_ids: string[];
  positions: number[];
  entry_hashes: string[];
  committed_at: string;
  replayed?: boolean;
}
export interface AppendRejected { outcome: "rejected"; error: ErrorBody; append_id?: string | null; lane_id?: string | null; digest?: string | null }
export type Receipt = AppendCommitted | AppendRejected;

/** The committed receipt, or the rejection's typed error (carrying the receipt as `err.receipt`). */
export function raiseIfRejected(receipt: Receipt): AppendCommitted {
  if (receipt.outcome === "rejected") {
    const err = errorFromWire(receipt.error) as LedgerError & { receipt?: Receipt };
    err.receipt = receipt;
    throw err;
  }
  return receipt;
}

export interface ConnectOptions {
  /** Commands on this tenant's subjects, receipts in its inbox `_INBOX_<tenant>`, blobs in its buckets. */
  tenant?: string;
  /** A trusted client receiving each tenant's receipts under `_INBOX_<tenant>` (a deployment with a tenants file). */
  tenantInboxes?: boolean;
  inboxPrefix?: string;
  user?: string;
  pass?: string;
  token?: string;
  /** Where the JetStream API is (blob buckets); found out for a tenant by asking `JS.LEDGER.API` once. */
  jsApiPrefix?: string;
  subjects?: Subjects;
  redactor?: Redactor;
  timeoutMs?: number;
  connectTimeoutMs?: number;
}

/** Each entry a nats:// or tls:// URL with a host (spec/wire.md, "Connecting"). */
export function natsServers(url: string | string[]): string[] {
  const entries = (Array.isArray(url) ? url : url.split(",")).map((u) => u.trim()).filter((u) => u);
  if (!entries.length) throw new InvalidRequest("NATS URL: no server given", { url: String(url) });
  for (const entry of entries) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(entry);
    } catch {
      parsed = undefined;
    }
    if (parsed === undefined || !["nats:", "tls:"].includes(parsed.protocol) || !parsed.hostname) {
      throw new InvalidRequest(`NATS URL: ${JSON.stringify(entry)} is not a nats:// or tls:// URL with a host`, { url: entry });
    }
  }
  return entries;
}

/** The one place nats.js errors become ledger errors. */
export function transportError(err: unknown, what: string): LedgerError {
  if (err instanceof LedgerError) return err;
  const name = err instanceof Error ? err.constructor.name : typeof err;
  const message = err instanceof Error ? err.message : String(err);
  if (name === "TimeoutError" || /timeout/i.test(message)) return new LedgerTimeout(`${what}: no answer in time`);
  if (/max_payload|MAX_PAYLOAD/i.test(message)) return new RequestTooLarge(`${what}: larger than the server's max_payload`);
  if (isNoResponders(err)) return new LedgerUnavailable(`${what}: no sequencer is answering`);
  return new LedgerUnavailable(`${what}: ${name}: ${message}`);
}

function isNoResponders(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const withCheck = err as Error & { isNoResponders?: () => boolean };
  return err.constructor.name === "NoRespondersError" || withCheck.isNoResponders?.() === true || (err.cause instanceof Error && isNoResponders(err.cause));
}

type Waiter = { resolve: (r: Receipt) => void; done: boolean };

/** An append the stream has durably accepted; its receipt may follow. */
export class AppendHandle {
  constructor(
    readonly appendId: string,
    private readonly receiptPromise: Promise<Receipt>,
    private readonly waiter: Waiter,
    private readonly client: LedgerClient,
    readonly tenant: string,
  ) {}

  /** The commit: the receipt's typed error when rejected; LedgerTimeout when
   * none came (and get_receipt knows none): resend the same append, safely. */
  async receipt(timeoutMs = this.client.timeoutMs): Promise<AppendCommitted> {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<"timeout">((resolve) => (timer = setTimeout(() => resolve("timeout"), timeoutMs)));
    try {
      const found = await Promise.race([this.receiptPromise, timedOut]);
      if (found === "timeout") {
        try {
          return await this.client.getReceipt(this.appendId, { tenant: this.tenant });
        } catch {
          throw new LedgerTimeout("no receipt in time", { append_id: this.appendId, timeout_s: timeoutMs / 1000 });
        }
      }
      return raiseIfRejected(found);
    } finally {
      clearTimeout(timer);
      this.client.forget(this.appendId, this.waiter);
    }
  }
}

export class LedgerClient {
  readonly subjects: Subjects;
  readonly redactor: Redactor;
  readonly timeoutMs: number;
  readonly tenant: string | undefined;
  readonly js: JetStreamClient;
  private readonly tenantInboxes: boolean;
  private readonly ownInboxPrefix: string;
  private readonly inboxes = new Map<string, [string, Subscription]>(); // by prefix
  private readonly waiting = new Map<string, Waiter[]>(); // by append id
  private readonly stores = new Map<string, Promise<ObjectStore>>(); // by bucket

  constructor(
    readonly nc: NatsConnection,
    options: ConnectOptions = {},
  ) {
    this.subjects = options.subjects ?? new Subjects();
    this.redactor = options.redactor ?? Redactor.fromEnv();
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.tenant = options.tenant;
    // checkAPI off: nats.js would ask the account's JetStream info first,
    // which a tenant's account may not (it reaches its own buckets only).
    this.js = jetstream(nc, { timeout: this.timeoutMs, checkAPI: false, ...(options.jsApiPrefix ? { apiPrefix: options.jsApiPrefix } : {}) } as Parameters<typeof jetstream>[1]);
    this.tenantInboxes = options.tenantInboxes ?? (process.env["LANELEDGER_TENANT_INBOXES"] === "on" || options.tenant !== undefined);
    if (options.tenant !== undefined) this.tenantInboxes = true;
    this.ownInboxPrefix = options.inboxPrefix ?? (options.tenant !== undefined ? inboxPrefix(options.tenant) : "_INBOX");
  }

  /** Connect, failing within `connectTimeoutMs` (default 5 s) with
   * `unavailable`; once connected, reconnect for as long as it takes. */
  static async connect(url: string | string[], options: ConnectOptions = {}): Promise<LedgerClient> {
    // Credentials in a URL (nats://user:pass@host:port, as Python takes them)
    // become the connection's user and password; never printed.
    const given = natsServers(url).map((entry) => new URL(entry));
    const withUser = given.find((u) => u.username);
    const servers = given.map((u) => `${u.protocol}//${u.host}`);
    if (withUser !== undefined && options.user === undefined) {
      options = { ...options, user: decodeURIComponent(withUser.username), pass: decodeURIComponent(withUser.password) };
    }
    const inbox = options.inboxPrefix ?? (options.tenant !== undefined ? inboxPrefix(options.tenant) : undefined);
    let nc: NatsConnection;
    try {
      nc = await connect({
        servers,
        name: "laneledger-client-ts",
        timeout: options.connectTimeoutMs ?? 5000,
        maxReconnectAttempts: -1,
        reconnectTimeWait: 500,
        noAsyncTraces: true, // no Error (and stack) made per request: a fifth of the SDK's CPU per append
        ...(inbox ? { inboxPrefix: inbox } : {}),
        ...(options.user !== undefined ? { user: options.user, pass: options.pass ?? "" } : {}),
        ...(options.token !== undefined ? { token: options.token } : {}),
      });
    } catch (err) {
      throw new LedgerUnavailable(`cannot connect to ${servers.join(",")}: ${err instanceof Error ? err.message : String(err)}`);
    }
    let jsApiPrefix = options.jsApiPrefix;
    if (jsApiPrefix === undefined && options.tenant !== undefined) {
      const subjects = options.subjects ?? new Subjects();
      try {
        await nc.request(`${TENANT_JS_API_PREFIX}.STREAM.INFO.OBJ_${subjects.uploadsBucket(options.tenant)}`, "", { timeout: 2000 });
        jsApiPrefix = TENANT_JS_API_PREFIX;
      } catch {
        jsApiPrefix = undefined; // no accounts: the connection's own JetStream
      }
    }
    return new LedgerClient(nc, { ...options, ...(inbox ? { inboxPrefix: inbox } : {}), ...(jsApiPrefix ? { jsApiPrefix } : {}) });
  }

  async close(): Promise<void> {
    for (const [, sub] of this.inboxes.values()) sub.unsubscribe();
    this.inboxes.clear();
    this.waiting.clear();
    if (!this.nc.isClosed()) {
      await this.nc.flush().catch(() => undefined);
      await this.nc.close();
    }
  }

  // ------------------------------------------------------------ commands

  /** One command to the sequencer; its result, or the reply's typed error. */
  async command<T>(op: string, fields: Record<string, unknown>): Promise<T> {
    return this.request<T>(this.subjects.command(op, this.tenant), op, this.redactCommand(op, fields));
  }

  /** One request/reply to a ledger service on `subject` (on this client's
   * tenant's subjects when it has one): `{"status": "ok", "result"}`, or
   * the reply's typed error. Asked again for a moment while nobody subscribes. */
  async request<T>(subject: string, op: string, fields: Record<string, unknown>): Promise<T> {
    const body = Buffer.from(JSON.stringify({ op, ...fields }), "utf8");
    const extra = tenantHeaders(this.tenant);
    const hdrs = extra ? natsHeaders() : undefined;
    for (const [k, v] of Object.entries(extra ?? {})) hdrs?.set(k, v);
    const giveUp = Date.now() + Math.min(NO_RESPONDERS_GRACE_MS, this.timeoutMs);
    let pause = 50;
    for (;;) {
      let msg: Msg;
      try {
        msg = await this.nc.request(subject, body, { timeout: this.timeoutMs, ...(hdrs ? { headers: hdrs } : {}) });
      } catch (err) {
        // Nobody subscribed at this instant (a sequencer starting): nobody got it.
        if (isNoResponders(err) && Date.now() + pause <= giveUp) {
          await new Promise((r) => setTimeout(r, pause));
          pause *= 2;
          continue;
        }
        throw transportError(err, op);
      }
      let reply: unknown;
      try {
        reply = JSON.parse(Buffer.from(msg.data).toString("utf8"));
      } catch {
        throw new LedgerUnavailable(`${op}: the reply is not JSON`);
      }
      if (isPlainObject(reply) && reply["status"] === "ok") return reply["result"] as T;
      if (isPlainObject(reply) && reply["status"] === "error" && isPlainObject(reply["error"])) {
        throw errorFromWire(reply["error"] as unknown as ErrorBody);
      }
      throw new LedgerUnavailable(`${op}: a reply of unknown shape`);
    }
  }

  /** A command's fields with `undefined` left out and its free-form fields
   * redacted, after refusing a secret-shaped identifier among `identifiers`. */
  redactFields(fields: Record<string, unknown>, identifiers: readonly string[], freeForm: readonly string[], at = "$"): Record<string, unknown> {
    const defined = Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined));
    for (const name of identifiers) {
      const value = defined[name];
      if (typeof value !== "string") continue;
      const rule = Object.keys(this.redactor.redact(value).rules)[0];
      if (rule !== undefined) {
        throw new InvalidRequest(`${name} is secret-shaped (${rule}): an identifier cannot be redacted, so it is refused`, { path: `${at}.${name}`, rule });
      }
    }
    for (const name of freeForm) {
      if (defined[name] !== undefined && defined[name] !== null) defined[name] = this.redactor.redact(defined[name]).value;
    }
    return defined;
  }

  /** Secrets never leave the process: a command's free-form fields redacted,
   * a secret-shaped identifier refused (the sequencer does both again). */
  private redactCommand(op: string, fields: Record<string, unknown>): Record<string, unknown> {
    return this.redactFields(fields, COMMAND_IDENTIFIERS[op] ?? [], COMMAND_FREE_FORM[op] ?? []);
  }

  /** Register (or find) an actor. With `publicKey` (hex, or the private key
   * whose public half to register) its events must be signed. */
  ensureActor(tenant: string, key: string, kind: string, opts: { displayName?: string; attributes?: Record<string, unknown>; publicKey?: string | KeyObject } = {}): Promise<Actor> {
    const publicKey = typeof opts.publicKey === "object" ? publicKeyHex(opts.publicKey) : opts.publicKey;
    return this.command("ensure_actor", { tenant, key, kind, display_name: opts.displayName, attributes: opts.attributes ?? {}, public_key: publicKey });
  }

  createLane(tenant: string, sessionId: string, runId: string, name: string, opts: { kind?: string; parentLaneId?: string; actorId?: string; laneId?: string } = {}): Promise<Lane> {
    return this.command<Lane>("create_lane", {
      tenant, session_id: sessionId, run_id: runId, name, kind: opts.kind ?? "main", parent_lane_id: opts.parentLaneId, actor_id: opts.actorId, id: opts.laneId,
    }).then(withLaneDefaults);
  }

  createTurn(laneId: string, turnNo: number, opts: { turnId?: string; tenant?: string } = {}): Promise<Turn> {
    return this.command("create_turn", { lane_id: laneId, turn_no: turnNo, id: opts.turnId ?? newId(), tenant: opts.tenant });
  }

  createAction(
    laneId: string, turnId: string, actionType: string, name: string,
    opts: { effect: string; idempotency: string; idempotencyKey?: string; actionId?: string; tenant?: string },
  ): Promise<Action> {
    return this.command("create_action", {
      lane_id: laneId, turn_id: turnId, action_type: actionType, name, effect: opts.effect, idempotency: opts.idempotency,
      idempotency_key: opts.idempotencyKey, id: opts.actionId ?? newId(), tenant: opts.tenant,
    });
  }

  createAttempt(laneId: string, actionId: string, attemptNo: number, opts: { attemptId?: string; tenant?: string } = {}): Promise<Attempt> {
    return this.command("create_attempt", { lane_id: laneId, action_id: actionId, attempt_no: attemptNo, id: opts.attemptId ?? newId(), tenant: opts.tenant });
  }

  getLane(laneId: string, opts: { tenant?: string } = {}): Promise<Lane> {
    return this.command<Lane>("get_lane", { lane_id: laneId, tenant: opts.tenant }).then(withLaneDefaults);
  }

  loadLane(laneId: string, afterSeq = 0, limit = 1000, opts: { tenant?: string } = {}): Promise<LanePage> {
    return this.command<LanePage>("load_lane", { lane_id: laneId, after_seq: afterSeq, limit, tenant: opts.tenant }).then((page) => ({
      lane: withLaneDefaults(page.lane),
      events: page.events ?? [],
      has_more: page.has_more ?? false,
    }));
  }

  /** A lane's events after `afterSeq`, page by page to the end. A page
   * whose reply would be over the server's max_payload is asked again at
   * half the length, down to one event; the pages after it grow back. */
  async *lanePages(laneId: string, afterSeq = 0, opts: { limit?: number; tenant?: string } = {}): AsyncGenerator<LanePage> {
    const limit = opts.limit ?? 1000;
    let size = limit;
    for (;;) {
      let page: LanePage;
      try {
        page = await this.loadLane(laneId, afterSeq, size, { ...(opts.tenant ? { tenant: opts.tenant } : {}) });
      } catch (err) {
        if (!(err instanceof RequestTooLarge) || size === 1) throw err;
        size = Math.max(1, Math.floor(size / 2));
        continue;
      }
      yield page;
      const last = page.events.at(-1);
      if (last === undefined || !page.has_more) return;
      afterSeq = last["seq"] as number;
      size = Math.min(limit, size * 2);
    }
  }

  /** A session's (with `runId`, a run's) whole structure, page by page. */
  async loadStructure(sessionId: string, runId?: string, opts: { tenant?: string } = {}): Promise<Structure> {
    const ask = (after: StructureCursor, tenant: string | undefined) =>
      this.command<StructurePage>("load_structure", { session_id: sessionId, run_id: runId, after, limit: 1000, tenant });
    let page = await ask({ lanes: 0, turns: 0, actions: 0, attempts: 0 }, opts.tenant);
    const whole: Structure = { session_id: page.session_id, tenant: page.tenant, run_id: page.run_id ?? null, lanes: [], turns: [], actions: [], attempts: [] };
    for (;;) {
      whole.lanes.push(...(page.lanes ?? []).map(withLaneDefaults));
      whole.turns.push(...(page.turns ?? []));
      whole.actions.push(...(page.actions ?? []));
      whole.attempts.push(...(page.attempts ?? []));
      if (!page.has_more) return whole;
      // Every later page is of the first page's tenant (the id may have been resolved to it).
      const next: Partial<StructureCursor> = page.next ?? {}; // fields at 0 are left out of replies
      page = await ask({ lanes: next.lanes ?? 0, turns: next.turns ?? 0, actions: next.actions ?? 0, attempts: next.attempts ?? 0 }, page.tenant);
    }
  }

  /** A session's (run's) events after `afterPosition`, page by page to the end. */
  async *eventsPages(sessionId: string, runId?: string, opts: { tenant?: string } = {}): AsyncGenerator<EventsPage> {
    let after = 0;
    for (;;) {
      const op = runId === undefined ? "load_session" : "load_run";
      const page = await this.command<EventsPage>(op, { session_id: sessionId, run_id: runId, after_position: after, limit: 1000, tenant: opts.tenant });
      const events = page.events ?? [];
      yield { ...page, events, has_more: page.has_more ?? false };
      if (!page.has_more) return;
      after = page.next_position;
    }
  }

  /** A session (with `runId`: a run) whole, however large: each reply is one page. */
  async loadSession(sessionId: string, opts: { runId?: string; tenant?: string } = {}): Promise<SessionView> {
    const structure = await this.loadStructure(sessionId, opts.runId, { ...(opts.tenant ? { tenant: opts.tenant } : {}) });
    const events: CommittedEvent[] = [];
    for await (const page of this.eventsPages(sessionId, opts.runId, { tenant: structure.tenant })) events.push(...page.events);
    const runIds = [...new Set(structure.lanes.map((lane) => lane.run_id))].sort();
    return { ...structure, run_ids: runIds, events };
  }

  getReceipt(appendId: string, opts: { tenant?: string } = {}): Promise<AppendCommitted> {
    return this.command("get_receipt", { append_id: appendId, tenant: this.tenant === undefined ? opts.tenant : undefined });
  }

  // -------------------------------------------------------------- erasure

  /** One request of an erasure (spec/erasure.md): the first commits its
   * erasure event, each erases the next `limit` events it covers. */
  erasePage(opts: ErasePageOptions): Promise<ErasurePage> {
    return this.command("erase", {
      erasure_id: opts.erasureId, actor_id: opts.actorId, reason: opts.reason,
      session_id: opts.sessionId, run_id: opts.runId, data_subject: opts.dataSubject, committed_before: opts.committedBefore,
      after_position: opts.afterPosition ?? 0, limit: opts.limit ?? 200, dry_run: opts.dryRun ?? false, tenant: opts.tenant,
    });
  }

  /** Erase the content of a session's events, of one run's, of every event
   * naming `dataSubject`, or of every event of `tenant` committed before
   * `committedBefore` (spec/erasure.md), page by page from `afterPosition`
   * until none is left: the last page, with the counts of all pages. Safe
   * to call again with the same `erasureId` (after a timeout, say): what is
   * erased stays so, and the rest is erased. Stopped by `maxPages` or
   * `budgetMs`, the page says `has_more`: continue with its `erasure_id`
   * and `next_after_position`. */
  async erase(opts: EraseOptions): Promise<ErasurePage> {
    const { maxPages, budgetMs, ...request } = opts;
    const erasureId = opts.erasureId || newId(); // as Python's `erasure_id or new_id()`
    const started = performance.now();
    const totals = { erased: 0, already_erased: 0, unsealed: 0 };
    let after = opts.afterPosition ?? 0;
    for (let pages = 1; ; pages++) {
      const page = await this.erasePage({ ...request, erasureId, afterPosition: after });
      totals.erased += page.erased;
      totals.already_erased += page.already_erased;
      totals.unsealed += page.unsealed;
      const spent = (maxPages !== undefined && pages >= maxPages) || (budgetMs !== undefined && performance.now() - started >= budgetMs);
      if (!page.has_more || spent) return { ...page, ...totals };
      after = page.next_after_position;
    }
  }

  // -------------------------------------------------------------- appends

  /** Publish an append (content redacted, blobs stored first) and return
   * once JetStream has durably accepted it. */
  async submit(lane: Lane, expectedLastSeq: number, events: Event[], opts: { appendId?: string } = {}): Promise<AppendHandle> {
    const appendId = opts.appendId ?? newId();
    const body = await this.appendBody(lane, expectedLastSeq, events, appendId);
    const [replyTo, waiter, promise] = await this.expectReceipt(appendId, lane.tenant);
    try {
      // No Nats-Msg-Id: JetStream would swallow a resend whose original was
      // rejected; the ledger's replay check makes every resend safe (spec/wire.md).
      const hdrs = natsHeaders();
      hdrs.set(REPLY_HEADER, replyTo);
      await this.js.publish(this.subjects.append(lane.tenant, lane.id), body, { headers: hdrs, timeout: this.timeoutMs });
    } catch (err) {
      this.forget(appendId, waiter);
      const refused =
        appendRefused(err, lane.tenant) ??
        (isNoResponders(err)
          ? new LedgerUnavailable(`append: no stream takes ${this.subjects.append(lane.tenant, lane.id)} (with a tenants file, is the tenant declared?)`)
          : transportError(err, "append"));
      refused.details["append_id"] ??= appendId;
      throw refused;
    }
    return new AppendHandle(appendId, promise, waiter, this, lane.tenant);
  }

  /** The append request as published; `request_too_large` over 1 MiB. */
  async appendBody(lane: Lane, expectedLastSeq: number, events: Event[], appendId: string): Promise<Buffer> {
    const body = Buffer.from(
      JSON.stringify({ lane_id: lane.id, expected_last_seq: expectedLastSeq, append_id: appendId, events: await this.storeContent(lane.tenant, events) }),
      "utf8",
    );
    if (body.length > MAX_REQUEST_BYTES) {
      throw new RequestTooLarge(`append is ${body.length} bytes, the limit is ${MAX_REQUEST_BYTES}`, { size_bytes: body.length, limit_bytes: MAX_REQUEST_BYTES, append_id: appendId });
    }
    return body;
  }

  /** Append and wait for the commit; transport failures are retried with the same append id. */
  async append(lane: Lane, expectedLastSeq: number, events: Event[], opts: { appendId?: string; retries?: number; timeoutMs?: number } = {}): Promise<AppendCommitted> {
    const appendId = opts.appendId ?? newId();
    const retries = opts.retries ?? 2;
    for (let attempt = 0; ; attempt++) {
      try {
        const handle = await this.submit(lane, expectedLastSeq, events, { appendId });
        return await handle.receipt(opts.timeoutMs);
      } catch (err) {
        if (!(err instanceof TransportError) || attempt >= retries) throw err;
        await new Promise((r) => setTimeout(r, Math.min(100 * 2 ** attempt, 2000)));
      }
    }
  }

  private async expectReceipt(appendId: string, tenant: string): Promise<[string, Waiter, Promise<Receipt>]> {
    const prefix = this.tenantInboxes ? inboxPrefix(tenant) : this.ownInboxPrefix;
    let entry = this.inboxes.get(prefix);
    if (entry === undefined) {
      const inbox = createInbox(prefix);
      const sub = this.nc.subscribe(inbox, { callback: (err, msg) => { if (!err) this.onReceipts(msg); } });
      entry = [inbox, sub];
      this.inboxes.set(prefix, entry);
      await this.nc.flush(); // the server has the subscription before the append can be answered
    }
    const waiter: Waiter = { resolve: () => undefined, done: false };
    const promise = new Promise<Receipt>((resolve) => (waiter.resolve = resolve));
    const list = this.waiting.get(appendId) ?? [];
    list.push(waiter);
    this.waiting.set(appendId, list);
    return [entry[0], waiter, promise];
  }

  /** @internal */
  forget(appendId: string, waiter: Waiter): void {
    const list = (this.waiting.get(appendId) ?? []).filter((w) => w !== waiter);
    if (list.length) this.waiting.set(appendId, list);
    else this.waiting.delete(appendId);
  }

  private onReceipts(msg: Msg): void {
    let receipts: unknown;
    try {
      receipts = JSON.parse(Buffer.from(msg.data).toString("utf8"));
    } catch {
      return; // not ours to answer; the waiting appends time out and resend
    }
    if (!Array.isArray(receipts)) return;
    for (const receipt of receipts) {
      if (!isPlainObject(receipt) || typeof receipt["append_id"] !== "string") continue;
      if (!isReceipt(receipt)) continue; // not a receipt: the waiting append times out and resends
      // Oldest waiter first: the same append id sent twice is answered in order.
      const waiter = (this.waiting.get(receipt["append_id"]) ?? []).find((w) => !w.done);
      if (waiter !== undefined) {
        waiter.done = true;
        waiter.resolve(receipt as unknown as Receipt);
      }
    }
  }

  // ------------------------------------------------------------- content

  /** The events redacted and externalized (spec/content.md), once every
   * blob they reference is in the tenant's store: stored from the bytes an
   * event carries, or there already; `blob_missing` when neither. */
  async storeContent(tenant: string, events: Event[]): Promise<Event[]> {
    const out: Event[] = [];
    const uploads = new Map<string, Buffer>();
    const needed = new Map<string, [string, number, string]>();
    events.forEach((event, i) => {
      const [done, blobs, rules] = prepareContent(event, this.redactor);
      if ((Object.keys(rules).length || blobs.size) && "signature" in event) {
        throw new InvalidRequest(
          "a signed event holds a secret or a value over 1 KiB: its signature would not cover what is sent; build it with makeEvent, which redacts and externalizes before signing",
          { path: `$.events[${i}]`, event_id: event["id"], redactions: rules, blobs: blobs.size },
        );
      }
      out.push(done);
      for (const [ref, data] of [...blobsOf(event), ...blobs]) uploads.set(ref, data);
      for (const [ref, size] of refsIn(done["payload"])) {
        if (!needed.has(`${ref} ${size}`)) needed.set(`${ref} ${size}`, [ref, size, `$.events[${i}].payload`]);
      }
    });
    if (needed.size) {
      await Promise.all([...needed.values()].map(([ref, size, path]) => this.storeBlob(tenant, ref, size, path, uploads)));
    }
    return out;
  }

  private async storeBlob(tenant: string, ref: string, size: number, path: string, uploads: Map<string, Buffer>): Promise<void> {
    const name = objectName(tenant, ref);
    const digest = objectStoreDigest(ref);
    // A tenant's client uploads into its uploads bucket and finds committed
    // blobs in its own; a trusted one uses the shared bucket.
    const readFrom = this.tenant === undefined ? [this.subjects.blobBucket] : [this.subjects.tenantBlobBucket(tenant), this.subjects.uploadsBucket(tenant)];
    const writeTo = this.tenant === undefined ? this.subjects.blobBucket : this.subjects.uploadsBucket(tenant);
    for (const bucket of readFrom) {
      const info = await this.bucket(bucket).then((s) => s.info(name)).catch(() => null);
      if (info && !info.deleted && info.digest === digest && info.size === size) return;
    }
    const data = uploads.get(ref);
    if (data === undefined || data.length !== size) {
      throw new BlobMissing(
        "the event references a blob that is neither stored nor carried by the event (makeEvent's events carry their blobs' bytes; a copy does not)",
        { ref, size_bytes: size, path },
      );
    }
    let stored;
    try {
      stored = await (await this.bucket(writeTo)).putBlob({ name }, data);
    } catch (err) {
      const refused = appendRefused(err, tenant);
      if (refused instanceof QuotaExceeded) throw new QuotaExceeded(`upload blob: the bucket ${writeTo} is full (the tenant's blob_bytes limit)`, { limit: "blob_bytes", tenant, bucket: writeTo });
      throw transportError(err, "upload blob");
    }
    if (stored.digest !== digest) {
      throw new IntegrityError("the object store kept another digest for the uploaded blob", { kind: "blob_mismatch", ref, stored_digest: stored.digest });
    }
  }

  /** @internal An object store bucket, opened once. `missing`: the error
   * when it is not there (by default: a blob bucket the sequencer creates). */
  bucket(name: string, missing?: (cause: string) => LedgerError): Promise<ObjectStore> {
    let store = this.stores.get(name);
    if (store === undefined) {
      store = new Objm(this.js).open(name).catch((err) => {
        this.stores.delete(name);
        if (missing !== undefined) throw missing(String(err));
        throw new EntityNotFound(`no blob bucket ${name}: the sequencer creates it (a tenant's, on the tenant's first command)`, { kind: "blob_bucket", bucket: name, cause: String(err) });
      });
      this.stores.set(name, store);
    }
    return store;
  }
}

function isReceipt(value: Record<string, unknown>): boolean {
  if (value["outcome"] === "rejected") return isPlainObject(value["error"]) && typeof value["error"]["code"] === "string";
  return (
    value["outcome"] === "committed" && typeof value["digest"] === "string" && Number.isInteger(value["first_seq"]) &&
    Number.isInteger(value["last_seq"]) && Array.isArray(value["entry_hashes"])
  );
}

/** Replies leave out fields at their default (a new lane's last_seq 0). */
function withLaneDefaults(lane: Lane): Lane {
  return { ...lane, kind: lane.kind ?? "main", last_seq: lane.last_seq ?? 0, head_hash: lane.head_hash ?? GENESIS_HASH };
}

/** The digest string the JetStream object store keeps for those bytes. */
export function objectStoreDigest(ref: string): string {
  return "SHA-256=" + Buffer.from(ref.replace(/^sha256:/, ""), "hex").toString("base64url") + "="; // 32 bytes: one pad, as Python writes it
}

/** JetStream's refusal of a publish: a tenant's stream at its backlog limit
 * (quota_exceeded), or undefined for anything else. */
function appendRefused(err: unknown, tenant: string): LedgerError | undefined {
  if (!(err instanceof JetStreamApiError)) return undefined;
  const api = err.apiError();
  const limit = api.err_code === STORE_FAILED ? { "maximum messages exceeded": "append_backlog", "maximum bytes exceeded": "append_backlog_bytes" }[api.description] : undefined;
  if (limit !== undefined) {
    return new QuotaExceeded(
      `append: tenant ${JSON.stringify(tenant)} has as many append requests waiting as its limit allows (${api.description}); resend later, more slowly`,
      { limit, tenant },
    );
  }
  return new LedgerUnavailable(`append: JetStream refused it: ${api.description}`, { err_code: api.err_code });
}

// Commands (spec/content.md, "Redaction"): per op, the free-form fields
// redacted like a payload, and the identifiers refused when secret-shaped.
const COMMAND_FREE_FORM: Record<string, string[]> = { ensure_actor: ["display_name", "attributes"] };
const COMMAND_IDENTIFIERS: Record<string, string[]> = {
  ensure_actor: ["key", "kind"],
  create_lane: ["session_id", "run_id", "name", "kind"],
  create_action: ["action_type", "name", "idempotency_key"],
};

