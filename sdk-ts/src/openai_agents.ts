// A recorder for the OpenAI Agents SDK for JavaScript (`@openai/agents`,
// `@openai/agents-core`): a tracing processor (spec/openai-agents.md,
// "JavaScript") mapping traces and spans onto the ledger as the Python
// recorder does (laneledger.adapters.openai_agents): a trace is a run with
// one turn on lane `main`, generation and response spans `model_call`
// attempts, function and handoff spans `tool_call` attempts, causation on
// the spines of spec/adapters.md.
//
// The SDK calls a processor without awaiting it (`void processor.onSpanStart(span)`)
// and logs what it rejects with, so the processor copies each report at once
// and records the copies one at a time, in order; it can stop nothing.
// Every id (turn, action, attempt, event, append) is derived from the
// tenant, the trace and the span, so a report recorded twice commits once.
//
// `dataSubject`: whose personal data the runs hold, named on every event
// recorded (spec/erasure.md), so that subject's erasure erases them.
//
//   const recorder = await OpenAIAgentsRecorder.connect(url, { tenant: "acme" });
//   setTraceProcessors([recorder.processor]);  // or addTraceProcessor
//   await run(agent, "…");
//   await recorder.close();

import { defineToolInputGuardrail, getCurrentSpan, ToolGuardrailFunctionOutputFactory, type Span, type SpanData, type ToolInputGuardrailDefinition, type Trace, type TracingProcessor } from "@openai/agents-core";
import { LedgerClient, type ConnectOptions } from "./client.js";
import type { Event } from "./content.js";
import { InvalidRequest, LedgerError, LedgerTimeout, LedgerUnavailable } from "./errors.js";
import { errorPayload, hooksAt, Spine } from "./guard.js";
import { derivedId } from "./ids.js";
import { LaneRecorder } from "./recorder.js";

/** What this recorder records and how (spec/adapters.md), in run.started's payload.adapter. */
export const OPENAI_AGENTS_GUARANTEES = {
  adapter: "laneledger.openai-agents-ts",
  version: "1",
  hooks: hooksAt("best_effort", { cost: "unsupported", subagent: "unsupported", streaming: "unsupported", hitl: "unsupported" }),
  recovery: "none",
};

/** With `strictTools` (and `recorder.strictToolGuardrail` on the tools): a tool's request commits before it runs. */
export const OPENAI_AGENTS_STRICT_GUARANTEES = { ...OPENAI_AGENTS_GUARANTEES, hooks: { ...OPENAI_AGENTS_GUARANTEES.hooks, requested_before_call: "strict" as const } };

const MODEL_SPANS = new Set(["generation", "response"]);
const TOOL_SPANS = new Set(["function", "handoff"]);

type Exported = { id: string; trace_id: string; started_at: string | null; ended_at: string | null; span_data: Record<string, unknown>; error: { message: string; data?: unknown } | null };

interface RunState { lane: LaneRecorder; actorId: string; turnId: string; spine: Spine; error?: unknown }
interface CallState { actionId: string; attemptId: string; requestId: string; actionType: string; name: string; base: Record<string, unknown> }

export class OpenAIAgentsRecorder implements TracingProcessor {
  /** Reports that could not be recorded (logged; best effort). */
  lost = 0;
  private queue: Promise<void> = Promise.resolve();
  private readonly runs = new Map<string, Promise<RunState>>(); // by trace id
  private readonly calls = new Map<string, CallState>(); // by span id
  // Why a function span's start was not recorded, for the strict guardrail
  // to name; dropped when the span ends, so at most the spans in flight.
  private readonly startFailures = new Map<string, unknown>(); // by span id

  constructor(
    readonly client: LedgerClient,
    readonly tenant: string,
    readonly opts: { provider?: string; agentVersion?: string; strictTools?: boolean; timeoutMs?: number; dataSubject?: string } = {},
  ) {
    const t = opts.timeoutMs;
    if (t !== undefined && !(Number.isFinite(t) && t > 0)) throw new InvalidRequest("timeoutMs must be a positive number of milliseconds", { timeoutMs: t });
    // Refused here, not in every append: a recorder is best effort, and each report would be lost.
    const subject: unknown = opts.dataSubject;
    if (subject !== undefined && (typeof subject !== "string" || subject === "")) {
      throw new InvalidRequest("dataSubject is a non-empty string (an id)", { path: "$.dataSubject" });
    }
  }

  static async connect(url: string | string[], opts: { tenant: string; scoped?: boolean; provider?: string; strictTools?: boolean; timeoutMs?: number; dataSubject?: string; connect?: ConnectOptions }): Promise<OpenAIAgentsRecorder> {
    const { tenant, scoped, connect, ...rest } = opts;
    const client = await LedgerClient.connect(url, { ...connect, ...(scoped ? { tenant } : {}) });
    try {
      return new OpenAIAgentsRecorder(client, tenant, rest);
    } catch (err) {
      await client.close(); // its options were refused
      throw err;
    }
  }

  get guarantees(): typeof OPENAI_AGENTS_GUARANTEES {
    return this.opts.strictTools ? OPENAI_AGENTS_STRICT_GUARANTEES : OPENAI_AGENTS_GUARANTEES;
  }

  /** A tool input guardrail (`tool({ ..., inputGuardrails: [recorder.strictToolGuardrail] })`):
   * the SDK awaits it inside the tool's function span, before the tool runs,
   * and a `throwException` ends the run (`ToolInputGuardrailTripwireTriggered`)
   * without running the tool. It waits until the span's `attempt.requested`
   * has committed (everything reported before it first), at most `timeoutMs`
   * (default 5 s); when that cannot be, the tool does not run and the
   * tripwire's output names the ledger error. */
  get strictToolGuardrail(): ToolInputGuardrailDefinition {
    return defineToolInputGuardrail({
      name: "laneledger-request-before-call",
      run: async () => {
        try {
          await this.requestCommitted(getCurrentSpan());
          return ToolGuardrailFunctionOutputFactory.allow();
        } catch (err) {
          return ToolGuardrailFunctionOutputFactory.throwException({ laneledger: errorPayload(err) });
        }
      },
    });
  }

  private async requestCommitted(span: Span<SpanData> | null): Promise<void> {
    if (!this.opts.strictTools) throw new InvalidRequest("strictToolGuardrail needs a recorder made with strictTools: its run.started must say so");
    if (span === null || span.spanData?.type !== "function") {
      throw new InvalidRequest("the tool runs outside a traced function span (tracing off?): its request cannot be recorded first");
    }
    const timeoutMs = this.opts.timeoutMs ?? 5000;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new LedgerTimeout(`the tool's request did not commit within ${timeoutMs} ms`, { span_id: span.spanId })), timeoutMs)));
    try {
      await Promise.race([this.queue, late]); // the span's start job was posted before the guardrail ran
    } finally {
      clearTimeout(timer);
    }
    if (!this.calls.has(span.spanId)) {
      const cause = this.startFailures.get(span.spanId);
      this.startFailures.delete(span.spanId);
      throw cause instanceof LedgerError ? cause : new LedgerUnavailable(`the tool's request could not be recorded: ${cause instanceof Error ? cause.message : "its run's start was not recorded"}`, { span_id: span.spanId });
    }
  }

  /** For `setTraceProcessors([recorder.processor])` / `addTraceProcessor`. */
  get processor(): TracingProcessor {
    return this;
  }

  // ------------------------------------------------------------ the SDK's calls: copy, queue, return

  onTraceStart(trace: Trace): Promise<void> {
    const t = { traceId: trace.traceId, name: trace.name, groupId: trace.groupId, metadata: trace.metadata ?? {} };
    return this.post(() => this.traceStarted(t));
  }

  onTraceEnd(trace: Trace): Promise<void> {
    const traceId = trace.traceId;
    return this.post(() => this.traceEnded(traceId));
  }

  onSpanStart(span: Span<SpanData>): Promise<void> {
    const copy = exported(span);
    return this.post(() => this.spanStarted(copy), (err) => this.startFailures.set(copy.id, err));
  }

  onSpanEnd(span: Span<SpanData>): Promise<void> {
    this.startFailures.delete(span.spanId); // its guardrail, if any, has run
    const copy = exported(span);
    return this.post(() => this.spanEnded(copy));
  }

  /** Everything reported so far, recorded (or counted in `lost`). */
  forceFlush(): Promise<void> {
    return this.queue;
  }

  async shutdown(): Promise<void> {
    await this.queue;
  }

  async close(): Promise<void> {
    await this.queue;
    await this.client.close();
  }

  private post(job: () => Promise<void>, failed?: (err: unknown) => void): Promise<void> {
    this.queue = this.queue.then(job).catch((err: unknown) => {
      this.lost += 1;
      failed?.(err);
      console.warn(`laneledger: an OpenAI Agents report was not recorded: ${err instanceof LedgerError ? `${err.code}: ` : ""}${err instanceof Error ? err.message : String(err)}`);
    });
    return Promise.resolve(); // never makes the SDK wait, never rejects
  }

  // ------------------------------------------------------------ recording, one report at a time

  private id(...parts: string[]): string {
    return derivedId(["openai-agents", this.tenant, ...parts]);
  }

  private event(run: RunState, eventType: string, subjectId: string, payload: Record<string, unknown>, what: string[], at: string | null, cause?: string): Event {
    return run.lane.event(eventType, {
      actorId: run.actorId, subjectId, payload, eventId: this.id(...what, eventType),
      ...(cause ? { causationId: cause } : {}), ...(at ? { occurredAt: isoMicros(at) } : {}),
    });
  }

  private async commit(run: RunState, events: Event[], what: string[]): Promise<void> {
    await run.lane.append(events, { appendId: this.id(...what, "append") });
  }

  private async traceStarted(t: { traceId: string; name: string; groupId: string | null; metadata: Record<string, unknown> }): Promise<void> {
    const starting = (async (): Promise<RunState> => {
      const actor = await this.client.ensureActor(this.tenant, `agent:openai-agents/main@${this.opts.agentVersion ?? "js"}`, "agent");
      const lane = await LaneRecorder.open(this.client, this.tenant, t.groupId ?? t.traceId, t.traceId, "main", { actorId: actor.id, dataSubject: this.opts.dataSubject });
      const turn = await this.client.createTurn(lane.lane.id, 1, { turnId: this.id(t.traceId, "turn"), tenant: this.tenant });
      const run: RunState = { lane, actorId: actor.id, turnId: turn.id, spine: new Spine() };
      const what = [t.traceId, "start"];
      const started = this.event(run, "run.started", t.traceId, { adapter: this.guarantees, workflow_name: t.name, group_id: t.groupId, metadata: t.metadata }, what, null);
      const prompt = this.event(run, "context.prompt_composed", lane.lane.id, { prompt_kind: "user", synthesized: true, label: "the run's input (traces do not carry it)" }, what, null);
      const turnStarted = this.event(run, "turn.started", turn.id, { turn_no: 1 }, what, null, prompt["id"] as string);
      await this.commit(run, [started, prompt, turnStarted], what);
      run.spine.promptId = prompt["id"] as string;
      return run;
    })();
    this.runs.set(t.traceId, starting);
    await starting;
  }

  private async traceEnded(traceId: string): Promise<void> {
    const starting = this.runs.get(traceId);
    this.runs.delete(traceId); // also when its start failed (the promise rejects)
    const run = await starting;
    if (run === undefined) return; // its start was not recorded: nothing to end
    const what = [traceId, "end"];
    const turnDone = this.event(run, "turn.completed", run.turnId, { turn_no: 1 }, what, null, run.spine.lastInferenceId);
    const end = run.error === undefined
      ? this.event(run, "run.completed", traceId, {}, what, null, turnDone["id"] as string)
      : this.event(run, "run.failed", traceId, { error: run.error }, what, null, turnDone["id"] as string);
    await this.commit(run, [turnDone, end], what);
  }

  private async spanStarted(span: Exported): Promise<void> {
    const type = String(span.span_data["type"]);
    if (!MODEL_SPANS.has(type) && !TOOL_SPANS.has(type)) return;
    const run = await this.runs.get(span.trace_id);
    if (run === undefined) return;
    const model = type === "generation" ? (span.span_data["model"] as string | undefined) : undefined;
    const actionType = MODEL_SPANS.has(type) ? "model_call" : "tool_call";
    const name = actionType === "model_call" ? model ?? "openai-responses" : type === "handoff" ? "handoff" : String(span.span_data["name"]);
    const action = await this.client.createAction(run.lane.lane.id, run.turnId, actionType, name, {
      effect: actionType === "model_call" || type === "handoff" ? "none" : "unknown",
      idempotency: actionType === "model_call" || type === "handoff" ? "not_applicable" : "unknown",
      actionId: this.id(span.trace_id, span.id, "action"), tenant: this.tenant,
    });
    const attempt = await this.client.createAttempt(run.lane.lane.id, action.id, 1, { attemptId: this.id(span.trace_id, span.id, "attempt"), tenant: this.tenant });
    const base: Record<string, unknown> = { action_type: actionType, name, attempt_no: 1, span_id: span.id };
    if (actionType === "model_call") Object.assign(base, { provider: this.opts.provider ?? "openai", ...(model ? { model } : {}) });
    const request: Record<string, unknown> = { ...base };
    if (span.span_data["input"] !== undefined && span.span_data["input"] !== "") request["input"] = span.span_data["input"];
    if (type === "handoff") request["from_agent"] = span.span_data["from_agent"];
    const what = [span.trace_id, span.id, "start"];
    // A model call follows the previous inference (or the prompt); a tool call hangs off the inference that asked for it.
    const cause = run.spine.cause();
    const started = this.event(run, "action.started", action.id, { action_type: actionType, name }, what, span.started_at, cause);
    const requested = this.event(run, "attempt.requested", attempt.id, request, what, span.started_at, cause);
    await this.commit(run, [started, requested], what);
    this.calls.set(span.id, { actionId: action.id, attemptId: attempt.id, requestId: requested["id"] as string, actionType, name, base });
  }

  private async spanEnded(span: Exported): Promise<void> {
    const type = String(span.span_data["type"]);
    const run = await this.runs.get(span.trace_id);
    if (run === undefined) return;
    if (type === "agent" && span.error && run.error === undefined) run.error = { message: span.error.message, data: span.error.data ?? null };
    const call = this.calls.get(span.id);
    if (call === undefined) return;
    this.calls.delete(span.id);
    const what = [span.trace_id, span.id, "end"];
    const duration = span.started_at && span.ended_at ? Math.max(0, Date.parse(span.ended_at) - Date.parse(span.started_at)) : undefined;
    const timing = duration === undefined ? {} : { duration_ms: duration };
    let terminal: Event;
    if (span.error) {
      const error = { code: call.actionType === "model_call" ? "model_error" : "tool_error", message: span.error.message, data: span.error.data ?? null };
      terminal = this.event(run, "attempt.failed", call.attemptId, { ...call.base, ...timing, error }, what, span.ended_at, call.requestId);
    } else {
      terminal = this.event(run, "attempt.completed", call.attemptId, { ...call.base, ...timing, outcome: outcomeOf(span) }, what, span.ended_at, call.requestId);
    }
    const actionDone = this.event(run, span.error ? "action.failed" : "action.completed", call.actionId, { action_type: call.actionType, name: call.name, attempts: 1 }, what, span.ended_at, terminal["id"] as string);
    await this.commit(run, [terminal, actionDone], what);
    if (call.actionType === "model_call") run.spine.lastInferenceId = terminal["id"] as string;
  }
}

/** The span as reported, as JSON values: the SDK keeps filling its data afterwards. */
function exported(span: Span<SpanData>): Exported {
  const json = JSON.parse(JSON.stringify(span.toJSON() ?? {})) as Record<string, unknown>;
  return {
    id: span.spanId,
    trace_id: span.traceId,
    started_at: span.startedAt,
    ended_at: span.endedAt,
    span_data: (json["span_data"] as Record<string, unknown> | undefined) ?? {},
    error: span.error ? { message: span.error.message, data: span.error.data } : null,
  };
}

/** An attempt's outcome from its span's data: a model's output and tokens, a tool's result, a handoff's target. */
function outcomeOf(span: Exported): Record<string, unknown> {
  const d = span.span_data;
  if (d["type"] === "function") return { result: d["output"] ?? null };
  if (d["type"] === "handoff") return { to_agent: d["to_agent"] ?? null };
  const usage = (d["usage"] ?? {}) as Record<string, unknown>;
  const tokens = Object.fromEntries(Object.entries({ input_tokens: usage["input_tokens"], output_tokens: usage["output_tokens"] }).filter(([, v]) => typeof v === "number"));
  return { ...(d["output"] !== undefined ? { output: d["output"] } : {}), ...(d["response_id"] ? { response_id: d["response_id"] } : {}), ...tokens };
}

/** The SDK's ISO times (milliseconds) in the ledger's form (microseconds). */
function isoMicros(at: string): string {
  const ms = Date.parse(at);
  return Number.isNaN(ms) ? at : new Date(ms).toISOString().replace("Z", "000Z");
}
