// A LangGraph.js checkpointer on laneledger (spec/langgraph.md): every
// checkpoint a revision in the checkpoint service (over the inline limit an
// artifact, uploaded first), anchored to the ledger event naming its id, key
// and digest (never its values) in the lane of its thread, run and
// namespace; pending writes likewise; deleteThread erases after an event
// records what it erases. `configurable.data_subject` names whose personal
// data a thread holds on its records and their events. The same keys, records and events as the Python
// saver (laneledger.adapters.langgraph).
//
//   import { LaneledgerSaver } from "@laneledger/sdk/langgraph";
//   const saver = await LaneledgerSaver.connect("nats://127.0.0.1:4222", { tenant: "acme" });
//   const graph = builder.compile({ checkpointer: saver });

import type { RunnableConfig } from "@langchain/core/runnables";
import {
  BaseCheckpointSaver, TASKS, WRITES_IDX_MAP, compareWritesSortKeys, copyCheckpoint, getCheckpointId, maxChannelVersion, writesSortKey,
  type ChannelVersions, type Checkpoint as LangGraphCheckpoint, type CheckpointListOptions, type CheckpointMetadata,
  type CheckpointPendingWrite, type CheckpointTuple, type PendingWrite, type SerializerProtocol,
} from "@langchain/langgraph-checkpoint";
import { canonicalize, isPlainObject } from "./canonical.js";
import { sha256Hex } from "./chain.js";
import { anchorOf, CheckpointClient, type Anchor, type Checkpoint, type CheckpointInfo } from "./checkpoints.js";
import { LedgerClient, type ConnectOptions } from "./client.js";
import { EntityConflict, EntityNotFound, IdempotencyViolation, IntegrityError, InvalidRequest, LaneConflict } from "./errors.js";
import { derivedId, newId } from "./ids.js";
import { LaneRecorder } from "./recorder.js";
import {
  CHECKPOINT_EVENT, CHECKPOINT_FORMAT, DEFAULT_RUN, ERASED_EVENT, KEY_PREFIX, WRITES_EVENT, WRITES_FORMAT,
  field, isString, jsonTyped, laneName, nsKey, quote, recordId, redactTyped, rows, threadKey, typedJson, writesKeyOf,
} from "./langgraph_records.js";

export const ACTOR_KEY = "service:langgraph-saver";
const SAVE_ATTEMPTS = 16; // revision or lane-head races retried (another writer won)
const FETCH_BATCH = 16; // records fetched at once while listing
// The records (checkpoints and writes) a list across namespaces or threads
// may go through: past it, the search is refused rather than left unbounded.
export const LIST_SEARCH_LIMIT = 10_000;

type Conf = { thread_id: string; checkpoint_ns: string; checkpoint_id?: string };

function conf(config: RunnableConfig | undefined, what: string): Conf {
  const c = (config?.configurable ?? {}) as Record<string, unknown>;
  if (c["thread_id"] === undefined || c["thread_id"] === null || String(c["thread_id"]) === "") {
    throw new InvalidRequest(`${what} needs configurable.thread_id`, { path: "$.configurable.thread_id" });
  }
  const id = config ? getCheckpointId(config) : undefined;
  return { thread_id: String(c["thread_id"]), checkpoint_ns: String(c["checkpoint_ns"] ?? ""), ...(id ? { checkpoint_id: String(id) } : {}) };
}

/** `configurable.data_subject`: whose personal data the thread's records
 * hold (spec/langgraph.md, "Data subjects"), a pseudonymous id; or undefined. */
function dataSubjectOf(config: RunnableConfig | undefined): string | undefined {
  const subject = (config?.configurable as Record<string, unknown> | undefined)?.["data_subject"];
  if (subject === undefined || subject === null) return undefined;
  if (typeof subject !== "string" || subject === "") {
    throw new InvalidRequest("configurable.data_subject is a non-empty string (an id)", { path: "$.configurable.data_subject" });
  }
  return subject;
}

function configOf(threadId: string, checkpointNs: string, checkpointId: string): RunnableConfig {
  return { configurable: { thread_id: threadId, checkpoint_ns: checkpointNs, checkpoint_id: checkpointId } };
}

function isRevisionConflict(err: unknown): err is EntityConflict {
  return err instanceof EntityConflict && err.details["reason"] === "revision_conflict";
}

/** Serializes this process's read-merge-save of one key. */
class KeyLocks {
  private readonly tails = new Map<string, Promise<unknown>>();
  run<T>(key: string, step: () => Promise<T>): Promise<T> {
    const done = (this.tails.get(key) ?? Promise.resolve()).then(step, step);
    const tail = done.catch(() => undefined);
    this.tails.set(key, tail);
    void tail.then(() => { if (this.tails.get(key) === tail) this.tails.delete(key); });
    return done;
  }
}

export class LaneledgerSaver extends BaseCheckpointSaver {
  readonly checkpoints: CheckpointClient;
  actorId: string | undefined;
  private readonly lanes = new Map<string, Promise<LaneRecorder>>(); // by thread, run, lane
  private readonly revisionsSeen = new Map<string, number>(); // key -> its latest revision, as last seen
  private readonly runs = new Map<string, string>(); // record id -> its run
  private readonly locks = new KeyLocks();

  /** `client`: connected, with the sequencer and the checkpoint service on
   * its NATS. `recordEvents` false: no checkpoint or writes events, saves
   * unanchored (erasures are recorded either way). Call `setup()` once. */
  constructor(
    readonly client: LedgerClient,
    readonly tenant: string,
    opts: { serde?: SerializerProtocol; recordEvents?: boolean; actorKey?: string; listSearchLimit?: number } = {},
  ) {
    super(opts.serde);
    this.checkpoints = new CheckpointClient(client);
    this.recordEvents = opts.recordEvents ?? true;
    this.actorKey = opts.actorKey ?? ACTOR_KEY;
    this.listSearchLimit = opts.listSearchLimit ?? LIST_SEARCH_LIMIT;
  }

  private readonly recordEvents: boolean;
  private readonly actorKey: string;
  private readonly listSearchLimit: number;

  /** Register the saver's actor (`service:langgraph-saver`, kind `service`). */
  async setup(): Promise<void> {
    this.actorId = (await this.client.ensureActor(this.tenant, this.actorKey, "service")).id;
  }

  /** A saver on its own connection (`close()` ends it). `scoped`: as the
   * tenant's own producer (`producer-<tenant>`), else the shared one. */
  static async connect(url: string | string[], opts: { tenant: string; scoped?: boolean; recordEvents?: boolean; connect?: ConnectOptions }): Promise<LaneledgerSaver> {
    const client = await LedgerClient.connect(url, { ...opts.connect, ...(opts.scoped ? { tenant: opts.tenant } : {}) });
    try {
      const saver = new LaneledgerSaver(client, opts.tenant, { ...(opts.recordEvents !== undefined ? { recordEvents: opts.recordEvents } : {}) });
      await saver.setup();
      return saver;
    } catch (err) {
      await client.close();
      throw err;
    }
  }

  close(): Promise<void> {
    return this.client.close();
  }

  // ------------------------------------------------------------------ put

  override async put(config: RunnableConfig, checkpoint: LangGraphCheckpoint, metadata: CheckpointMetadata, _newVersions: ChannelVersions): Promise<RunnableConfig> {
    const { thread_id: threadId, checkpoint_ns: checkpointNs, checkpoint_id: parentId } = conf(config, "put");
    const dataSubject = dataSubjectOf(config);
    const { channel_values: values, ...rest } = copyCheckpoint(checkpoint);
    const redactor = this.client.redactor;
    const dump = async (value: unknown) => typedJson(redactTyped(await this.serde.dumpsTyped(value), redactor));
    const state = {
      thread_id: threadId,
      checkpoint_ns: checkpointNs,
      checkpoint_id: checkpoint.id,
      parent_checkpoint_id: parentId ?? null,
      checkpoint: await dump(rest),
      // Pairs, not an object: a channel named like a secret ("api_key")
      // would have its whole value redacted by the key rule on save.
      channel_values: await Promise.all(Object.entries(values ?? {}).map(async ([name, value]) => [name, ...(await dump(value))])),
      metadata: await dump(metadata),
    };
    const runId = String((metadata as Record<string, unknown>)["run_id"] ?? (config.metadata as Record<string, unknown> | undefined)?.["run_id"] ?? DEFAULT_RUN);
    await this.storeCheckpoint(state, runId, { source: metadata.source ?? null, step: metadata.step ?? null }, dataSubject);
    return configOf(threadId, checkpointNs, checkpoint.id);
  }

  private storeCheckpoint(
    state: Record<string, unknown> & { thread_id: string; checkpoint_ns: string; checkpoint_id: string; parent_checkpoint_id: string | null },
    runId: string, more: Record<string, unknown>, dataSubject: string | undefined,
  ): Promise<Checkpoint> {
    const record = recordId(state.thread_id, state.checkpoint_ns, state.checkpoint_id);
    // Before any await: LangGraph may send this checkpoint's writes while it
    // is still being saved, and they go to the lane of its run.
    this.runs.set(record, runId);
    const event = { checkpoint_ns: state.checkpoint_ns, checkpoint_id: state.checkpoint_id, parent_checkpoint_id: state.parent_checkpoint_id, ...more };
    return this.store(nsKey(state.thread_id, state.checkpoint_ns), state, { format: CHECKPOINT_FORMAT, record, runId, eventType: CHECKPOINT_EVENT, event, dataSubject });
  }

  /** Merged into the checkpoint's writes record: a regular write already
   * stored for (task, index) is kept, a special one (error, interrupt,
   * resume …) replaced, as LangGraph's own savers do. */
  override async putWrites(config: RunnableConfig, writes: PendingWrite[], taskId: string, taskPath = ""): Promise<void> {
    const c = conf(config, "putWrites");
    if (!c.checkpoint_id) throw new InvalidRequest("putWrites needs configurable.checkpoint_id", { path: "$.configurable.checkpoint_id" });
    const { thread_id: threadId, checkpoint_ns: checkpointNs, checkpoint_id: checkpointId } = c as Required<Conf>;
    const dataSubject = dataSubjectOf(config);
    const record = recordId(threadId, checkpointNs, checkpointId);
    const key = writesKeyOf(nsKey(threadId, checkpointNs), record);
    const runId = await this.runOf(record, config);
    const incoming = writes.map(([channel, value], idx) => [taskId, WRITES_IDX_MAP[channel] ?? idx, channel, value] as const);
    const event = { checkpoint_ns: checkpointNs, checkpoint_id: checkpointId, task_id: taskId, task_path: taskPath, channels: incoming.map((w) => w[2]) };
    await this.locks.run(key, async () => {
      for (let attempt = 0; attempt < SAVE_ATTEMPTS; attempt++) {
        const latest = await this.latestRecord(key);
        const stored = latest ? rows(await this.state(latest), "writes", 5, "$.state") : [];
        const merged = new Map(stored.map((w) => [`${String(w[0])}\u0000${String(w[1])}`, w]));
        let changed = false;
        for (const [task, idx, channel, value] of incoming) {
          const at = `${task}\u0000${idx}`;
          if (idx >= 0 && merged.has(at)) continue;
          merged.set(at, [task, idx, channel, typedJson(redactTyped(await this.serde.dumpsTyped(value), this.client.redactor)), taskPath]);
          changed = true;
        }
        if (!changed) return;
        const sorted = [...merged.values()].sort((a, b) => compareWritesSortKeys(writesSortKey(String(a[4]), String(a[0]), Number(a[1])), writesSortKey(String(b[4]), String(b[0]), Number(b[1]))));
        const state = { thread_id: threadId, checkpoint_ns: checkpointNs, checkpoint_id: checkpointId, writes: sorted };
        try {
          await this.store(key, state, { format: WRITES_FORMAT, record: newId(), runId, eventType: WRITES_EVENT, event, dataSubject, expectedRevision: this.baseRevision(key, latest) });
          return;
        } catch (err) {
          if (!isRevisionConflict(err)) throw err; // else another process merged first: merge again on top
        }
      }
      throw new EntityConflict(`${key}: lost the revision race`, { kind: "checkpoint", key, reason: "revision_conflict" });
    });
  }

  /** The run of a checkpoint, whose lane its writes go to: as this saver
   * saved it, else as stored, else as the config's metadata names it. */
  private async runOf(record: string, config: RunnableConfig): Promise<string> {
    let run = this.runs.get(record);
    if (run === undefined) {
      const stored = await this.getRecord(record);
      run = stored?.run_id ?? String((config.metadata as Record<string, unknown> | undefined)?.["run_id"] ?? DEFAULT_RUN);
      this.runs.set(record, run);
    }
    return run;
  }

  // ------------------------------------------------------------------ reads

  override async getTuple(config: RunnableConfig): Promise<CheckpointTuple | undefined> {
    if (config.configurable?.["thread_id"] === undefined) return undefined;
    const { thread_id: threadId, checkpoint_ns: checkpointNs, checkpoint_id: checkpointId } = conf(config, "getTuple");
    const stored = checkpointId ? await this.getRecord(recordId(threadId, checkpointNs, checkpointId)) : await this.latestRecord(nsKey(threadId, checkpointNs));
    return stored === undefined ? undefined : this.tuple(stored);
  }

  private async tuple(stored: Checkpoint): Promise<CheckpointTuple> {
    const state = await this.state(stored);
    const load = ([type, data]: [string, Uint8Array]) => this.serde.loadsTyped(type, data);
    const threadId = field(state, "thread_id", isString, "string", "$.state");
    const checkpointNs = field(state, "checkpoint_ns", isString, "string", "$.state");
    const checkpointId = field(state, "checkpoint_id", isString, "string", "$.state");
    const parent = state["parent_checkpoint_id"];
    const checkpoint = (await load(jsonTyped(state["checkpoint"], "$.state.checkpoint"))) as LangGraphCheckpoint;
    checkpoint.channel_values = {};
    for (const [name, type, data] of rows(state, "channel_values", 3, "$.state")) {
      checkpoint.channel_values[String(name)] = await load(jsonTyped([type, data], `$.state.channel_values.${String(name)}`));
    }
    if (checkpoint.v < 4 && typeof parent === "string") await this.migratePendingSends(checkpoint, threadId, checkpointNs, parent);
    const tuple: CheckpointTuple = {
      config: configOf(threadId, checkpointNs, checkpointId),
      checkpoint,
      metadata: (await load(jsonTyped(state["metadata"], "$.state.metadata"))) as CheckpointMetadata,
      pendingWrites: (await this.pendingWrites(writesKeyOf(stored.key, stored.id))).map(([task, channel, value]) => [task, channel, value] as CheckpointPendingWrite),
    };
    if (typeof parent === "string") tuple.parentConfig = configOf(threadId, checkpointNs, parent);
    return tuple;
  }

  /** Its writes, in writesSortKey order (as saved). */
  private async pendingWrites(key: string): Promise<[string, string, unknown][]> {
    const latest = await this.latestRecord(key);
    if (latest === undefined) return [];
    const out: [string, string, unknown][] = [];
    for (const [task, , channel, typed] of rows(await this.state(latest), "writes", 5, "$.state")) {
      const [type, data] = jsonTyped(typed, "$.state.writes");
      out.push([String(task), String(channel), await this.serde.loadsTyped(type, data)]);
    }
    return out;
  }

  /** A checkpoint of format v < 4 kept its pending sends in its parent's
   * writes: moved into its `__pregel_tasks` channel, as LangGraph's savers do. */
  private async migratePendingSends(checkpoint: LangGraphCheckpoint, threadId: string, checkpointNs: string, parentId: string): Promise<void> {
    const parentWrites = await this.pendingWrites(writesKeyOf(nsKey(threadId, checkpointNs), recordId(threadId, checkpointNs, parentId)));
    checkpoint.channel_values[TASKS] = parentWrites.filter(([, channel]) => channel === TASKS).map(([, , value]) => value);
    const versions = Object.values(checkpoint.channel_versions ?? {});
    checkpoint.channel_versions = { ...checkpoint.channel_versions, [TASKS]: versions.length ? maxChannelVersion(...versions) : this.getNextVersion(undefined) };
  }

  /** Newest first. With a thread and a namespace: that namespace's
   * revisions (newest saved first); otherwise the service's listing of the
   * keys under the thread (or, without a thread, under `langgraph/` of the
   * saver's tenant), by checkpoint id descending. */
  override async *list(config: RunnableConfig, options: CheckpointListOptions = {}): AsyncGenerator<CheckpointTuple> {
    const { limit, before, filter } = options;
    if (limit !== undefined && limit <= 0) return;
    const c = (config?.configurable ?? {}) as Record<string, unknown>;
    const threadId = c["thread_id"] === undefined ? undefined : String(c["thread_id"]);
    const checkpointNs = c["checkpoint_ns"] === undefined ? undefined : String(c["checkpoint_ns"]);
    const checkpointId = c["checkpoint_id"] === undefined ? undefined : String(c["checkpoint_id"]);
    const beforeId = before?.configurable?.["checkpoint_id"] as string | undefined;
    const matches = (t: CheckpointTuple) =>
      (!checkpointId || t.checkpoint.id === checkpointId) &&
      (!beforeId || t.checkpoint.id < beforeId) &&
      (!filter || Object.entries(filter).every(([k, v]) => (t.metadata as Record<string, unknown> | undefined)?.[k] === v));
    let ordered: AsyncIterable<CheckpointTuple>;
    if (threadId !== undefined && checkpointId) {
      const found = await this.getTuple(config);
      ordered = found ? [found] as unknown as AsyncIterable<CheckpointTuple> : emptyTuples();
    } else if (threadId !== undefined && checkpointNs !== undefined) {
      const infos = (await this.revisions(nsKey(threadId, checkpointNs))).sort((a, b) => b.revision - a.revision);
      // Without a filter or a cursor the first `limit` records are the answer: fetch no more.
      ordered = this.fetch(infos, limit && !filter && !before ? Math.min(FETCH_BATCH, limit) : FETCH_BATCH);
    } else {
      const prefix = threadId !== undefined ? threadKey(threadId) + "/ns/" : KEY_PREFIX;
      const wantNs = checkpointNs === undefined ? undefined : quote(checkpointNs);
      const listed = (await this.checkpoints.erase({ keyPrefixes: [prefix], dryRun: true, listAtMost: this.listSearchLimit, tenant: this.tenant })).erased;
      if (listed.length > this.listSearchLimit) {
        throw new InvalidRequest(`list without ${threadId === undefined ? "a thread_id" : "a checkpoint_ns"} searches at most ${this.listSearchLimit} records; these keys hold more: name the ${threadId === undefined ? "thread" : "namespace"}`, {
          path: "$.configurable", limit: this.listSearchLimit, key_prefix: prefix,
        });
      }
      const infos = listed.filter((i) => i.format === CHECKPOINT_FORMAT && (wantNs === undefined || i.key.split("/")[3] === wantNs));
      const tuples: CheckpointTuple[] = [];
      for await (const t of this.fetch(infos)) tuples.push(t);
      tuples.sort((a, b) => (a.checkpoint.id < b.checkpoint.id ? 1 : a.checkpoint.id > b.checkpoint.id ? -1 : 0));
      ordered = tuples as unknown as AsyncIterable<CheckpointTuple>;
    }
    let count = 0;
    for await (const found of ordered) {
      if (!matches(found)) continue;
      yield found;
      if (limit !== undefined && ++count >= limit) return;
    }
  }

  private async *fetch(infos: CheckpointInfo[], size = FETCH_BATCH): AsyncGenerator<CheckpointTuple> {
    for (let start = 0; start < infos.length; start += size) {
      const stored = await Promise.all(infos.slice(start, start + size).map((info) => this.getRecord(info.id)));
      yield* await Promise.all(stored.filter((s): s is Checkpoint => s !== undefined).map((s) => this.tuple(s)));
    }
  }

  // ------------------------------------------------------------------ erasure

  /** Erase the thread: every record under its keys and their blobs, after
   * the ledger records the erasure (ids and digests, never values). */
  override async deleteThread(threadId: string): Promise<void> {
    const key = threadKey(String(threadId));
    const infos = (await this.checkpoints.erase({ keys: [key], keyPrefixes: [key + "/"], dryRun: true, tenant: this.tenant })).erased;
    if (!infos.length) return;
    const payload = {
      reason: "delete_thread",
      keys: [key],
      key_prefixes: [key + "/"],
      checkpoints: infos.map((i) => ({ checkpoint_id: i.id, key: i.key, revision: i.revision, digest: i.digest, format: i.format })),
    };
    // It lists the records' digests: it names their data subject when they
    // name one, so that subject's erasure erases this payload too.
    const subjects = new Set(infos.flatMap((i) => (i.data_subject ? [i.data_subject] : [])));
    const dataSubject = subjects.size === 1 ? [...subjects][0] : undefined;
    // Record, then erase: a crash in between leaves an erasure recorded and
    // not done, which the same call finishes; never bytes gone unrecorded.
    await this.record(String(threadId), DEFAULT_RUN, "", ERASED_EVENT, payload, newId(), dataSubject);
    await this.checkpoints.erase({ keys: [key], keyPrefixes: [key + "/"], tenant: this.tenant });
    for (const info of infos) this.runs.delete(info.id);
  }

  // ------------------------------------------------------------------ the store

  private async getRecord(record: string): Promise<Checkpoint | undefined> {
    try {
      return await this.checkpoints.get(record, { tenant: this.tenant });
    } catch (err) {
      if (err instanceof EntityNotFound) return undefined;
      throw err;
    }
  }

  private latestRecord(key: string): Promise<Checkpoint | undefined> {
    return this.checkpoints.latest(key, { tenant: this.tenant });
  }

  private async state(stored: Checkpoint): Promise<Record<string, unknown>> {
    const state = await this.checkpoints.loadState(stored);
    if (!isPlainObject(state)) throw new InvalidRequest("a stored LangGraph record is not an object", { key: stored.key, id: stored.id, path: "$.state" });
    return state;
  }

  private async revisions(key: string): Promise<CheckpointInfo[]> {
    const infos: CheckpointInfo[] = [];
    for (let after = 0; ;) {
      const page = await this.checkpoints.revisions(key, { afterRevision: after, limit: 1000, tenant: this.tenant });
      infos.push(...page.revisions);
      const last = page.revisions[page.revisions.length - 1];
      if (!page.has_more || last === undefined) return infos;
      after = last.revision;
    }
  }

  /** The revision to save on top of: the latest, or for a key with none
   * left, the last one seen (erased revisions keep their numbers). */
  private baseRevision(key: string, latest: Checkpoint | undefined): number {
    return latest?.revision ?? this.revisionsSeen.get(key) ?? 0;
  }

  /** The event (with the record's id, key, digest and format), then the
   * record anchored to it; both name `dataSubject`, so the ledger's erasure
   * of that data subject erases both (spec/langgraph.md, "Data subjects").
   * Without `expectedRevision` the record is independent of the key's
   * others (a checkpoint names its parent), so a lost revision race is
   * saved again on top; with it, a lost race is the caller's (it merged
   * what it read). */
  private async store(
    key: string,
    state: Record<string, unknown> & { thread_id: string; checkpoint_ns: string },
    opts: { format: string; record: string; runId: string; eventType: string; event: Record<string, unknown>; dataSubject: string | undefined; expectedRevision?: number },
  ): Promise<Checkpoint> {
    // Values were redacted before they became hex; what a rule finds now is
    // in the record's own encoding, and replacing it would corrupt it.
    const done = this.client.redactor.redact(state);
    if (done.count) {
      throw new InvalidRequest("a redaction rule matches this LangGraph record's encoded bytes: saving it redacted would corrupt it", { path: "$.state", key, rules: Object.keys(done.rules).sort() });
    }
    const digest = sha256Hex(canonicalize(state));
    let anchor: Anchor | undefined;
    if (this.recordEvents) {
      const payload = { checkpoint_id: opts.record, key, digest, format: opts.format, langgraph: opts.event };
      anchor = await this.record(state.thread_id, opts.runId, state.checkpoint_ns, opts.eventType, payload, derivedId(["lg-event", opts.record]), opts.dataSubject);
    }
    let expected = opts.expectedRevision ?? this.revisionsSeen.get(key) ?? this.baseRevision(key, await this.latestRecord(key));
    for (let attempt = 0; attempt < (opts.expectedRevision === undefined ? SAVE_ATTEMPTS : 1); attempt++) {
      let saved: Checkpoint;
      try {
        saved = await this.checkpoints.save(key, state, {
          expectedRevision: expected, format: opts.format, checkpointId: opts.record, sessionId: state.thread_id, runId: opts.runId,
          tenant: this.tenant, ...(anchor ? { anchor } : {}), dataSubject: opts.dataSubject,
        });
      } catch (err) {
        if (!isRevisionConflict(err)) throw err;
        expected = Number(err.details["actual_revision"]);
        this.revisionsSeen.set(key, expected);
        if (opts.expectedRevision !== undefined) throw err;
        continue;
      }
      this.revisionsSeen.set(key, Math.max(saved.revision, this.revisionsSeen.get(key) ?? 0));
      if (saved.digest !== digest) {
        // The service's own redaction rules rewrote the record: it would not decode.
        throw new IntegrityError("the checkpoint service stored this LangGraph record with other bytes than sent (its redaction rules match the encoding?)", { id: saved.id, key, digest, stored_digest: saved.digest });
      }
      return saved;
    }
    throw new EntityConflict(`${key}: lost the revision race ${SAVE_ATTEMPTS} times`, { kind: "checkpoint", key, reason: "revision_conflict" });
  }

  private lane(threadId: string, runId: string, checkpointNs: string): Promise<LaneRecorder> {
    const where = JSON.stringify([threadId, runId, laneName(checkpointNs)]);
    let recorder = this.lanes.get(where);
    if (recorder === undefined) {
      recorder = LaneRecorder.open(this.client, this.tenant, threadId, runId, laneName(checkpointNs), { ...(this.actorId ? { actorId: this.actorId } : {}) });
      recorder.catch(() => this.lanes.delete(where));
      this.lanes.set(where, recorder);
    }
    return recorder;
  }

  /** One event in the lane, and the anchor naming it. `appendId` is derived
   * from what the event records, so recording it twice commits once (a
   * resend from another process gets the original's anchor). */
  private async record(threadId: string, runId: string, checkpointNs: string, eventType: string, payload: Record<string, unknown>, appendId: string, dataSubject: string | undefined): Promise<Anchor> {
    if (this.actorId === undefined) throw new InvalidRequest("the saver is not set up: call setup() (or use LaneledgerSaver.connect)");
    const recorder = await this.lane(threadId, runId, checkpointNs);
    const event = recorder.event(eventType, { actorId: this.actorId, subjectId: recorder.lane.id, payload, dataSubject });
    for (let attempt = 0; attempt < SAVE_ATTEMPTS; attempt++) {
      try {
        return anchorOf(await recorder.append([event], { appendId }));
      } catch (err) {
        if (err instanceof LaneConflict) await recorder.reload();
        else if (err instanceof IdempotencyViolation) {
          return anchorOf(await this.client.getReceipt(appendId, { tenant: this.tenant }));
        } else throw err;
      }
    }
    throw new LaneConflict("the lane kept moving", { lane_id: recorder.lane.id });
  }
}

async function* emptyTuples(): AsyncGenerator<CheckpointTuple> {}
