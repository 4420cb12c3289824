// The attempt guard (spec/adapters.md; laneledger.sdk.guard): turn → action
// → attempt scopes around an agent loop. Entering an attempt commits
// `attempt.requested` and only then runs the call: when the ledger cannot
// commit, the typed error propagates and the call never happens. Leaving
// commits `attempt.completed` (with the outcome) or `attempt.failed` (with
// the error, which is then re-raised). Another `call.attempt()` is a retry.
// Causation follows the Korg spines (laneledger.sdk.spine): the prompt is
// the root, an inference's request points at the previous inference (or the
// prompt), a tool call's at the inference that asked for it, a retry at the
// failure before it.

import type { AppendCommitted } from "./client.js";
import type { Event } from "./content.js";
import { InvalidRequest, LedgerError } from "./errors.js";
import type { LaneRecorder } from "./recorder.js";

/** How a failed attempt names its error: type, message, and the ledger code. */
export function errorPayload(err: unknown): Record<string, unknown> {
  const error: Record<string, unknown> = {
    type: err instanceof Error ? err.constructor.name : typeof err,
    message: err instanceof Error ? err.message : String(err),
  };
  if (err instanceof LedgerError) error["code"] = err.code;
  return error;
}

export const PROMPT_EVENT = "context.prompt_composed";
export const PROMPT_KINDS = ["user", "subagent"] as const;

/** One agent's spine, as event ids: its prompt and its latest inference. */
export class Spine {
  promptId: string | undefined;
  lastInferenceId: string | undefined;

  /** What the next inference's request, a tool call's request, or a turn hangs off. */
  cause(): string | undefined {
    return this.lastInferenceId ?? this.promptId;
  }
}

export type Level = "strict" | "best_effort" | "unsupported";

/** The recording hooks every adapter states a level for (spec/adapters.md, "Guarantees"). */
export const HOOKS = ["run", "turn", "model_call", "tool_call", "requested_before_call", "outcome", "cost", "causation", "subagent", "streaming", "hitl"] as const;
export type Hook = (typeof HOOKS)[number];

/** Every hook at `level` but those `others` name. */
export function hooksAt(level: Level, others: Partial<Record<Hook, Level>> = {}): Record<Hook, Level> {
  return Object.fromEntries(HOOKS.map((hook) => [hook, others[hook] ?? level])) as Record<Hook, Level>;
}

/** What this guard records and how (spec/adapters.md), in run.started's
 * payload.adapter, as the Python adapters declare theirs. Not yet here:
 * sub-agents, pauses (hitl) and crash recovery (resume). */
export const GUARD_GUARANTEES = {
  adapter: "laneledger.guard-ts",
  version: "1",
  hooks: hooksAt("strict", { subagent: "unsupported", streaming: "unsupported", hitl: "unsupported" }),
  recovery: "none",
};

export class Guard {
  nextTurnNo: number;
  lastReceipt: AppendCommitted | undefined;
  readonly spine = new Spine();

  constructor(
    readonly recorder: LaneRecorder,
    readonly actorId: string,
    opts: { nextTurnNo?: number } = {},
  ) {
    this.nextTurnNo = opts.nextTurnNo ?? 1;
  }

  /** `run.started`, its payload naming the guard's guarantees (`adapter`). */
  async startRun(payload: Record<string, unknown> = {}): Promise<Event> {
    const event = this.event("run.started", this.recorder.lane.run_id, { ...payload, adapter: GUARD_GUARANTEES });
    await this.commit(event);
    return event;
  }

  /** The spine's root. A prompt the harness did not observe says so: `synthesized`. */
  async prompt(text?: string, opts: { kind?: (typeof PROMPT_KINDS)[number]; synthesized?: boolean; cause?: string; payload?: Record<string, unknown> } = {}): Promise<Event> {
    const kind = opts.kind ?? "user";
    if (!PROMPT_KINDS.includes(kind)) throw new InvalidRequest(`a prompt's kind is one of ${PROMPT_KINDS.join(", ")}`, { kind });
    const body: Record<string, unknown> = { prompt_kind: kind, synthesized: opts.synthesized ?? false, ...(opts.payload ?? {}) };
    if (text !== undefined) body["text"] = text;
    const event = this.event(PROMPT_EVENT, this.laneId, body, opts.cause);
    await this.commit(event);
    this.spine.promptId = event["id"] as string;
    return event;
  }

  get laneId(): string {
    return this.recorder.lane.id;
  }

  get tenant(): string {
    return this.recorder.lane.tenant;
  }

  event(eventType: string, subjectId: string, payload: Record<string, unknown>, cause?: string): Event {
    return this.recorder.event(eventType, { actorId: this.actorId, subjectId, payload, ...(cause ? { causationId: cause } : {}) });
  }

  async commit(...events: Event[]): Promise<AppendCommitted> {
    this.lastReceipt = await this.recorder.append(events);
    return this.lastReceipt;
  }

  /** A turn: `turn.started`, the body, then `turn.completed` or `turn.failed`. */
  async turn<T>(body: (turn: TurnScope) => Promise<T>): Promise<T> {
    const turnNo = this.nextTurnNo++;
    const turn = await this.recorder.client.createTurn(this.laneId, turnNo, { tenant: this.tenant });
    await this.commit(this.event("turn.started", turn.id, { turn_no: turnNo }, this.spine.cause()));
    const scope = new TurnScope(this, turn.id);
    let result: T;
    try {
      result = await body(scope);
    } catch (err) {
      await recordFailure(this, this.event("turn.failed", turn.id, { turn_no: turnNo, error: errorPayload(err) }, this.spine.lastInferenceId), err);
      throw err;
    }
    await this.commit(this.event("turn.completed", turn.id, { ...scope.outcome, turn_no: turnNo }, this.spine.lastInferenceId));
    return result;
  }
}

export class TurnScope {
  outcome: Record<string, unknown> = {};

  constructor(
    readonly guard: Guard,
    readonly turnId: string,
  ) {}

  /** An inference: effect `none`, so always safe to retry. */
  modelCall<T>(model: string, opts: { provider?: string }, body: (call: ActionScope) => Promise<T>): Promise<T> {
    return new ActionScope(this.guard, this.turnId, "model_call", model, { effect: "none", idempotency: "not_applicable", ...opts }).run(body);
  }

  /** A tool call; `effect` and `idempotency` decide whether recovery may retry it unasked. */
  toolCall<T>(
    name: string,
    opts: { effect: string; idempotency: string; idempotencyKey?: string; args?: Record<string, unknown> },
    body: (call: ActionScope) => Promise<T>,
  ): Promise<T> {
    return new ActionScope(this.guard, this.turnId, "tool_call", name, opts).run(body);
  }
}

export class ActionScope {
  actionId = "";
  attempts = 0;
  private cause: string | undefined;
  private lastFailure: string | undefined;
  private lastTerminal: string | undefined;
  private succeeded = false;

  constructor(
    readonly guard: Guard,
    readonly turnId: string,
    readonly actionType: string,
    readonly name: string,
    readonly opts: { effect: string; idempotency: string; idempotencyKey?: string; provider?: string; args?: Record<string, unknown> },
  ) {}

  /** @internal `action.started`, the body, `action.completed` or `action.failed`. */
  async run<T>(body: (call: ActionScope) => Promise<T>): Promise<T> {
    const g = this.guard;
    const action = await g.recorder.client.createAction(g.laneId, this.turnId, this.actionType, this.name, {
      effect: this.opts.effect,
      idempotency: this.opts.idempotency,
      tenant: g.tenant,
      ...(this.opts.idempotencyKey !== undefined ? { idempotencyKey: this.opts.idempotencyKey } : {}),
    });
    this.actionId = action.id;
    this.cause = g.spine.cause(); // the inference before (or the prompt)
    const started = g.event("action.started", action.id, { action_type: this.actionType, name: this.name, ...(this.opts.args ? { args: this.opts.args } : {}) }, this.cause);
    await g.commit(started);
    const payload = { action_type: this.actionType, name: this.name };
    let result: T;
    try {
      result = await body(this);
    } catch (err) {
      const failed = g.event("action.failed", action.id, { ...payload, attempts: this.attempts, error: errorPayload(err) }, this.lastTerminal);
      await recordFailure(g, failed, err);
      throw err;
    }
    const done = { ...payload, attempts: this.attempts };
    await g.commit(g.event(this.succeeded ? "action.completed" : "action.failed", action.id, done, this.lastTerminal));
    return result;
  }

  /** The next physical try. Its request is committed before `body` runs;
   * when that commit fails, `body` never runs and the error propagates. */
  async attempt<T>(body: (attempt: AttemptScope) => Promise<T>): Promise<T> {
    const g = this.guard;
    this.attempts += 1;
    const attemptNo = this.attempts;
    const attempt = await g.recorder.client.createAttempt(g.laneId, this.actionId, attemptNo, { tenant: g.tenant });
    const base: Record<string, unknown> = { action_type: this.actionType, name: this.name, attempt_no: attemptNo };
    if (this.actionType === "model_call") {
      base["model"] = this.name;
      if (this.opts.provider !== undefined) base["provider"] = this.opts.provider;
    }
    const request = g.event("attempt.requested", attempt.id, base, this.lastFailure ?? this.cause);
    await g.commit(request); // if this throws, the external call never runs
    const scope = new AttemptScope(this, attempt.id);
    const started = performance.now();
    let result: T;
    try {
      result = await body(scope);
    } catch (err) {
      const failed = g.event("attempt.failed", attempt.id, { ...base, duration_ms: Math.round(performance.now() - started), error: errorPayload(err) }, request["id"] as string);
      this.lastFailure = this.lastTerminal = failed["id"] as string;
      this.succeeded = false;
      await recordFailure(g, failed, err);
      throw err;
    }
    const completed = g.event("attempt.completed", attempt.id, { ...base, duration_ms: Math.round(performance.now() - started), outcome: scope.outcome }, request["id"] as string);
    const cost = scope.cost === undefined ? [] : [g.event("cost.recorded", attempt.id, { ...scope.cost, action_id: this.actionId, attempt_id: attempt.id }, completed["id"] as string)];
    await g.commit(completed, ...cost);
    this.lastTerminal = completed["id"] as string;
    this.succeeded = true;
    if (this.actionType === "model_call") g.spine.lastInferenceId = completed["id"] as string;
    return result;
  }
}

export class AttemptScope {
  outcome: Record<string, unknown> = {};
  cost: Record<string, unknown> | undefined;

  constructor(
    readonly action: ActionScope,
    readonly attemptId: string,
  ) {}

  /** The attempt's outcome, committed with `attempt.completed`. */
  complete(outcome: Record<string, unknown>): void {
    Object.assign(this.outcome, outcome);
  }

  /** A model call's outcome: text, thinking, tokens, and its cost (a
   * decimal string: then `cost.recorded` commits with the outcome). */
  inference(fields: {
    text?: string; thinking?: string; inputTokens?: number; outputTokens?: number; cacheReadTokens?: number;
    cacheWriteTokens?: number; cost?: string; currency?: string; outcome?: Record<string, unknown>;
  }): void {
    if (this.action.actionType !== "model_call") throw new InvalidRequest("inference() is for model calls", { action_type: this.action.actionType });
    const tokens = Object.fromEntries(
      Object.entries({ input_tokens: fields.inputTokens, output_tokens: fields.outputTokens, cache_read_tokens: fields.cacheReadTokens, cache_write_tokens: fields.cacheWriteTokens })
        .filter(([, v]) => v !== undefined),
    );
    const texts = Object.fromEntries(Object.entries({ text: fields.text, thinking: fields.thinking }).filter(([, v]) => v !== undefined));
    Object.assign(this.outcome, texts, tokens, fields.outcome ?? {});
    if (fields.cost !== undefined) {
      if (this.action.opts.provider === undefined) throw new InvalidRequest("a cost needs the model call's provider", { field: "provider" });
      this.cost = { provider: this.action.opts.provider, model: this.action.name, amount: fields.cost, currency: fields.currency ?? "USD", ...tokens };
    }
  }
}

/** Commit a failure event while `err` propagates; when the ledger cannot
 * take it either, the caller still gets `err` (the attempt stays unresolved,
 * which recovery reports). */
async function recordFailure(guard: Guard, event: Event, err: unknown): Promise<void> {
  try {
    await guard.commit(event);
  } catch (ledgerErr) {
    if (!(ledgerErr instanceof LedgerError)) throw ledgerErr;
    if (err instanceof Error) err.message += ` (laneledger: could not record ${String(event["event_type"])}: ${ledgerErr.message})`;
  }
}
