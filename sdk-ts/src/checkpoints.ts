// Checkpoints (spec/checkpoint.md) through the checkpoint service's
// request/reply subjects: save a revision of a key with optimistic
// concurrency (`expectedRevision`), read one back, erase. State is JSON,
// redacted before it leaves the process; over the service's inline limit it
// goes to the artifact bucket first (content-addressed) and the save carries
// the reference. Recovery plans are the Python CheckpointClient's alone for now.

import { createHash } from "node:crypto";
import type { ObjectStore } from "@nats-io/obj";
import { canonicalize } from "./canonical.js";
import { objectStoreDigest, type AppendCommitted, type LedgerClient } from "./client.js";
import { EntityNotFound, IntegrityError, LedgerUnavailable } from "./errors.js";
import { newId } from "./ids.js";

export const JSON_MEDIA_TYPE = "application/json";
const ERASE_BATCH = 1000; // keys, ids and run ids per erase request (the command's bound)

export interface Anchor { lane_id: string; seq: number; event_id: string }

export interface Checkpoint {
  id: string;
  key: string;
  revision: number;
  format: string;
  digest: string;
  session_id?: string | null;
  run_id?: string | null;
  tenant?: string | null;
  data_subject?: string | null; // whose personal data the state holds (spec/checkpoint.md, "Erasure")
  state?: unknown;
  artifact?: ArtifactRef | null;
  anchor?: Anchor | null;
  terminal?: boolean;
  created_at: string;
}

export interface ArtifactRef { sha256: string; size_bytes: number; media_type: string }

export interface CheckpointInfo extends Omit<Checkpoint, "state" | "created_at"> { state_bytes?: number; created_at?: string }

export interface ErasureReport { erased: CheckpointInfo[]; artifacts_erased: string[]; has_more?: boolean }

export interface CheckpointServiceInfo {
  artifact_bucket: string;
  max_inline_bytes: number;
  anchor_wait_s: number;
  applied_position: number;
  stream_last_position: number;
}

/** The anchor naming the last event of a committed append. */
export function anchorOf(receipt: AppendCommitted): Anchor {
  return { lane_id: receipt.lane_id, seq: receipt.last_seq, event_id: receipt.event_ids[receipt.event_ids.length - 1] as string };
}

/** The object name of a blob in the artifact bucket. */
export function artifactName(sha256: string): string {
  return `sha256/${sha256}`;
}

function isJsonMediaType(mediaType: string): boolean {
  const base = (mediaType.split(";")[0] ?? "").trim().toLowerCase();
  return base === JSON_MEDIA_TYPE || base.endsWith("+json");
}

export interface RevisionPage { key: string; revisions: CheckpointInfo[]; has_more: boolean }

// What a checkpoint names (refused when secret-shaped) and what is free-form (redacted).
const CHECKPOINT_IDENTIFIERS = ["id", "key", "format", "session_id", "run_id"] as const;

export class CheckpointClient {
  private serviceInfo: Promise<CheckpointServiceInfo> | undefined;

  constructor(readonly ledger: LedgerClient) {}

  private ask<T>(op: string, fields: Record<string, unknown>): Promise<T> {
    return this.ledger.request<T>(this.ledger.subjects.checkpoint(op, this.ledger.tenant), op, fields);
  }

  /** The service's limits and artifact bucket (the tenant's own on a
   * tenant's subjects; asking creates it), asked once. */
  info(): Promise<CheckpointServiceInfo> {
    this.serviceInfo ??= this.ask<CheckpointServiceInfo>("info", {}).catch((err: unknown) => {
      this.serviceInfo = undefined;
      throw err;
    });
    return this.serviceInfo;
  }

  private async artifactBucket(): Promise<ObjectStore> {
    const name = (await this.info()).artifact_bucket;
    return this.ledger.bucket(name, (cause) => new LedgerUnavailable(`no artifact bucket ${name}: is the checkpoint service up?`, { bucket: name, cause }));
  }

  /** Upload `data` (content-addressed: the same bytes are stored once) and
   * return the reference a save carries. */
  async putArtifact(data: Uint8Array, mediaType: string): Promise<ArtifactRef> {
    const sha256 = createHash("sha256").update(data).digest("hex");
    const ref = { sha256, size_bytes: data.length, media_type: mediaType };
    const store = await this.artifactBucket();
    const name = artifactName(sha256);
    const digest = objectStoreDigest(sha256);
    const there = await store.info(name).catch(() => null);
    if (there && !there.deleted && there.size === data.length && there.digest === digest) return ref; // do not replace chunks a reader may be reading
    const stored = await store.putBlob({ name }, data);
    if (stored.digest !== digest) throw new IntegrityError("the object store kept another digest for the uploaded artifact", { sha256, stored_digest: stored.digest });
    return ref;
  }

  /** The blob's bytes, checked against its sha256 and size. */
  async readArtifact(ref: ArtifactRef): Promise<Uint8Array> {
    const store = await this.artifactBucket();
    const data = await store.getBlob(artifactName(ref.sha256));
    if (data === null) throw new EntityNotFound("no such artifact in the bucket", { kind: "artifact", id: ref.sha256, reason: "artifact_missing" });
    if (data.length !== ref.size_bytes || createHash("sha256").update(data).digest("hex") !== ref.sha256) {
      throw new IntegrityError("artifact bytes do not match their reference", { sha256: ref.sha256 });
    }
    return data;
  }

  /** The checkpoint's state: inline as is; a JSON artifact decoded; another artifact's bytes. */
  async loadState(checkpoint: Checkpoint): Promise<unknown> {
    if (!checkpoint.artifact) return checkpoint.state;
    const data = await this.readArtifact(checkpoint.artifact);
    return isJsonMediaType(checkpoint.artifact.media_type) ? JSON.parse(Buffer.from(data).toString("utf8")) : data;
  }

  /** Save a revision of `key` with JSON `state` (redacted; over the
   * service's inline limit uploaded as an `application/json` artifact of
   * exactly its RFC 8785 bytes, so the digest is the same either way).
   * `expectedRevision` is the key's latest revision (0 for a new key):
   * another writer's newer one is `entity_conflict` (reason `revision_conflict`). */
  async save(
    key: string,
    state: unknown,
    opts: { expectedRevision: number; format: string; sessionId?: string; runId?: string; anchor?: Anchor; terminal?: boolean; checkpointId?: string; tenant?: string; dataSubject?: string },
  ): Promise<Checkpoint> {
    // Redacted before it is measured, spilled or digested: no secret reaches
    // the service, an artifact or a disk (spec/content.md).
    const redacted = this.ledger.redactor.redact(state).value;
    const raw = canonicalize(redacted);
    const artifact = raw.length > (await this.info()).max_inline_bytes ? await this.putArtifact(raw, JSON_MEDIA_TYPE) : undefined;
    const proposal = this.ledger.redactFields(
      {
        id: opts.checkpointId ?? newId(),
        key,
        format: opts.format,
        session_id: opts.sessionId,
        run_id: opts.runId,
        tenant: opts.tenant,
        data_subject: opts.dataSubject,
        anchor: opts.anchor,
        terminal: opts.terminal || undefined, // left out at its default, as Python's encoder does
      },
      CHECKPOINT_IDENTIFIERS,
      [],
      "$.checkpoint",
    );
    const checkpoint = artifact === undefined ? { ...proposal, state: redacted } : { ...proposal, artifact };
    return this.ask("save", { expected_revision: opts.expectedRevision, checkpoint });
  }

  /** Physically erase every revision of `keys`, each of `checkpointIds`,
   * every revision saved with one of `runIds` (under `keyPrefix`), of
   * every key under one of `keyPrefixes`, naming `dataSubject` and created
   * before `createdBefore` (a timestamp; those three sent with the first
   * request), with the artifacts nothing else references
   * (spec/checkpoint.md, "Erasure"); `dryRun`: only say what would be
   * erased (`listAtMost`: a dry run stops paging once it listed more than
   * that many). Batches of 1000, answered page by page. */
  async erase(opts: {
    keys?: string[]; checkpointIds?: string[]; runIds?: string[]; keyPrefix?: string; keyPrefixes?: string[];
    dataSubject?: string; createdBefore?: string; dryRun?: boolean; listAtMost?: number; tenant?: string;
  }): Promise<ErasureReport> {
    let todo = [opts.keys ?? [], opts.checkpointIds ?? [], opts.runIds ?? []];
    // The selectors that are not batched go with the first batch only: sent
    // with the next batches too, a dry run would list their revisions again.
    let once: Record<string, unknown> = { key_prefixes: opts.keyPrefixes ?? [], data_subject: opts.dataSubject, created_before: opts.createdBefore };
    const whole: ErasureReport = { erased: [], artifacts_erased: [] };
    for (;;) {
      const batch = todo.map((items) => items.slice(0, ERASE_BATCH));
      todo = todo.map((items) => items.slice(ERASE_BATCH));
      let after: CheckpointInfo | undefined;
      for (;;) { // pages: erased rows are gone; a dry run goes on after its last
        const report = await this.ask<ErasureReport>("erase", {
          keys: batch[0], checkpoint_ids: batch[1], run_ids: batch[2], key_prefix: opts.keyPrefix, ...once,
          dry_run: opts.dryRun ?? false, tenant: opts.tenant,
          after_key: opts.dryRun && after ? after.key : undefined, after_revision: opts.dryRun && after ? after.revision : 0,
        });
        const erased = report.erased ?? [];
        whole.erased.push(...erased);
        whole.artifacts_erased.push(...(report.artifacts_erased ?? []));
        if (!report.has_more || !erased.length) break;
        if (opts.dryRun && opts.listAtMost !== undefined && whole.erased.length > opts.listAtMost) return { ...whole, has_more: true };
        after = erased[erased.length - 1];
      }
      once = {};
      if (!todo.some((items) => items.length)) return whole;
    }
  }

  get(checkpointId: string, opts: { tenant?: string } = {}): Promise<Checkpoint> {
    return this.ask("get", { checkpoint_id: checkpointId, tenant: opts.tenant });
  }

  /** The key's latest revision, or undefined when nothing was saved under it. */
  async latest(key: string, opts: { tenant?: string } = {}): Promise<Checkpoint | undefined> {
    try {
      return await this.ask<Checkpoint>("latest", { key, tenant: opts.tenant });
    } catch (err) {
      if (err instanceof EntityNotFound && err.details["kind"] === "checkpoint") return undefined;
      throw err;
    }
  }

  revisions(key: string, opts: { afterRevision?: number; limit?: number; tenant?: string } = {}): Promise<RevisionPage> {
    return this.ask<RevisionPage>("revisions", { key, after_revision: opts.afterRevision ?? 0, limit: opts.limit ?? 100, tenant: opts.tenant }).then(
      (page) => ({ ...page, revisions: page.revisions ?? [], has_more: page.has_more ?? false }),
    );
  }
}
