// OpenTelemetry, used only when `@opentelemetry/api` (an optional peer dependency) is installed:
// an enqueue sends the active span's context along with the job (`traceContext`, a W3C
// traceparent the server keeps until the claim), and the Worker runs each attempt in a consumer
// span that is its child — one trace from the producer's request to the handler, as
// OpenTelemetry's messaging conventions have it for a single message. Without the API every
// function here does nothing.

import type * as Api from "@opentelemetry/api";

import type { Job } from "./calls.js";

let api: typeof Api | null | undefined;
/** The API's own provider, until an SDK's is set: its spans would record nothing. */
let noSdk: Api.TracerProvider | undefined;
const loading: Promise<void> = import("@opentelemetry/api").then(
  (module) => {
    api = module;
    noSdk = new module.ProxyTracerProvider().getDelegate();
  },
  () => {
    api = null;
  },
);

/** Resolves once it is known whether the API is installed: awaited before the first call that
 * may carry a trace context. */
export function loaded(): Promise<void> | undefined {
  return api === undefined ? loading : undefined;
}

/** The active span's context as a W3C traceparent, or undefined (no API, or no valid span). */
export function traceparent(): string | undefined {
  const context = api?.trace.getActiveSpan()?.spanContext();
  if (!api || !context || !api.trace.isSpanContextValid(context)) return undefined;
  return `00-${context.traceId}-${context.spanId}-${context.traceFlags.toString(16).padStart(2, "0")}`;
}

/** An attempt's span (opaque to the Worker). */
export type Span = Api.Span;

/** Whether spans are worth making: the API is installed and an SDK's provider is set (the API
 * alone makes spans that record nothing, at a cost per job). */
export function tracing(): boolean {
  return leaseqTracer() !== undefined;
}

/** The last SDK provider seen, and leaseq's tracer from it: a provider's `getTracer` builds its
 * cache key on every call, once per job otherwise. */
let cached: { provider: Api.TracerProvider; tracer: Api.Tracer } | undefined;

/** leaseq's tracer when an SDK's provider is set, else undefined. */
function leaseqTracer(): Api.Tracer | undefined {
  if (!api) return undefined;
  const provider = (api.trace.getTracerProvider() as Api.ProxyTracerProvider).getDelegate();
  if (provider === noSdk) return undefined;
  if (cached?.provider !== provider) cached = { provider, tracer: provider.getTracer("leaseq") };
  return cached.tracer;
}

/** Starts the span of one attempt of `job`: a child of the producer's context when the job has
 * one, else a new trace. Undefined unless `tracing()`. */
export function startAttempt(job: Job): Span | undefined {
  const tracer = leaseqTracer();
  if (!api || tracer === undefined) return undefined;
  const parent = job.traceContext === undefined ? api.ROOT_CONTEXT : producerContext(api, job.traceContext);
  return tracer.startSpan(
    `${job.queue} process`,
    {
      kind: api.SpanKind.CONSUMER,
      attributes: {
        "messaging.system": "leaseq",
        "messaging.operation.type": "process",
        "messaging.destination.name": job.queue,
        "messaging.message.id": job.id,
        "leaseq.job_id": job.id,
        "leaseq.queue": job.queue,
        "leaseq.attempt": job.attempt,
      },
    },
    parent,
  );
}

/** The context a traceparent names (remote, as a producer's is). */
function producerContext(otel: typeof Api, traceparent: string): Api.Context {
  const [, traceId, spanId, flags] = traceparent.split("-");
  return otel.trace.setSpanContext(otel.ROOT_CONTEXT, {
    traceId: traceId!,
    spanId: spanId!,
    traceFlags: parseInt(flags!, 16),
    isRemote: true,
  });
}

/** Runs `fn` with `span` active, so that the handler's own spans are its children. */
export function within<T>(span: Span | undefined, fn: () => T): T {
  if (!api || span === undefined) return fn();
  return api.context.with(api.trace.setSpan(api.context.active(), span), fn);
}

/** Outcomes that mark an attempt's span as an error. */
const ERRORS = new Set(["fail", "retry", "dead", "lost", "fenced", "timed_out"]);

/** Ends an attempt's span with what became of it (`kind`: complete, fail, retry, dead, snooze,
 * lost, fenced, timed_out): an error status, with the handler's exception, unless it completed
 * or snoozed. */
export function end(span: Span | undefined, kind: string, error?: unknown): void {
  if (!api || span === undefined) return;
  span.setAttribute("leaseq.outcome", kind);
  if (error instanceof Error) span.recordException(error);
  if (ERRORS.has(kind)) {
    const message = error instanceof Error ? error.message : kind;
    span.setStatus({ code: api.SpanStatusCode.ERROR, message });
  }
  span.end();
}
