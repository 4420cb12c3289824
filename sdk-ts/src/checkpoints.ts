// Checkpoints (spec/checkpoint.md) through the checkpoint service's
// request/reply subjects: save a revision of a key with optimistic
// concurrency (`expectedRevision`), read one back. Inline JSON state only,
// redacted before it leaves the process; artifacts, recovery plans and
// erasure are the Python CheckpointClient's alone for now.

import type { LedgerClient } from "./client.js";
import { EntityNotFound } from "./errors.js";
import { newId } from "./ids.js";

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
  state?: unknown;
  anchor?: Anchor | null;
  terminal?: boolean;
  created_at: string;
}

export interface RevisionPage { key: string; revisions: Omit<Checkpoint, "state">[]; has_more: boolean }

// What a checkpoint names (refused when secret-shaped) and what is free-form (redacted).
const CHECKPOINT_IDENTIFIERS = ["id", "key", "format", "session_id", "run_id"] as const;

export class CheckpointClient {
  constructor(readonly ledger: LedgerClient) {}

  private ask<T>(op: string, fields: Record<string, unknown>): Promise<T> {
    return this.ledger.request<T>(this.ledger.subjects.checkpoint(op, this.ledger.tenant), op, fields);
  }

  /** Save a revision of `key` with inline JSON `state`. `expectedRevision`
   * is the key's latest revision (0 for a new key): another writer's newer
   * one is `entity_conflict` (reason `revision_conflict`). */
  async save(
    key: string,
    state: unknown,
    opts: { expectedRevision: number; format: string; sessionId?: string; runId?: string; anchor?: Anchor; terminal?: boolean; checkpointId?: string; tenant?: string },
  ): Promise<Checkpoint> {
    const proposal = this.ledger.redactFields(
      {
        id: opts.checkpointId ?? newId(),
        key,
        format: opts.format,
        session_id: opts.sessionId,
        run_id: opts.runId,
        tenant: opts.tenant,
        state,
        anchor: opts.anchor,
        terminal: opts.terminal || undefined, // left out at its default, as Python's encoder does
      },
      CHECKPOINT_IDENTIFIERS,
      ["state"],
      "$.checkpoint",
    );
    return this.ask("save", { expected_revision: opts.expectedRevision, checkpoint: proposal });
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
