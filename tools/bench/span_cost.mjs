// What one consumer span costs in OpenTelemetry's Node SDK alone, as the Worker makes it per
// attempt (BasicTracerProvider, BatchSpanProcessor, an exporter to nowhere, the
// AsyncLocalStorage context manager): CPU µs per span started, made current around an async
// no-op, and ended, with leaseq's seven attributes and the outcome: over a fresh process's first
// 20,000 spans, and once warmed up. Section 15's Node drain costs its client about 13–24 µs a job
// with prefetch and 40–60 at defaults without tracing (docs/benchmarks.md): this is the floor
// tracing adds to it, whatever the Worker does.
import { createRequire } from "node:module";

const require = createRequire(new URL("../../clients/node/package.json", import.meta.url));
const api = require("@opentelemetry/api");
const { AsyncLocalStorageContextManager } = require("@opentelemetry/context-async-hooks");
const { BasicTracerProvider, BatchSpanProcessor } = require("@opentelemetry/sdk-trace-base");
const nowhere = { export: (_spans, done) => done({ code: 0 }), shutdown: async () => {} };
api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
api.trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(nowhere)] }));
const tracer = api.trace.getTracer("leaseq");

async function one(traced) {
  if (!traced) return await (async () => null)();
  const span = tracer.startSpan("bench process", {
    kind: api.SpanKind.CONSUMER,
    attributes: {
      "messaging.system": "leaseq",
      "messaging.operation.type": "process",
      "messaging.destination.name": "bench",
      "messaging.message.id": "1",
      "leaseq.job_id": "1",
      "leaseq.queue": "bench",
      "leaseq.attempt": 1,
    },
  });
  await api.context.with(api.trace.setSpan(api.context.active(), span), async () => null);
  span.setAttribute("leaseq.outcome", "complete");
  span.end();
}

async function cost(traced, n) {
  const before = process.cpuUsage();
  for (let i = 0; i < n; i++) {
    await one(traced);
    // The event loop turns between jobs in a Worker: timers (the batch processor's) get to run.
    if (i % 50 === 0) await new Promise((resolve) => setImmediate(resolve));
  }
  const used = process.cpuUsage(before);
  return Math.round(((used.user + used.system) / n) * 10) / 10;
}

// First, as a fresh Worker process makes them: V8 compiles the SDK's code as it warms up, which
// section 15's drains pay within their first 20,000 jobs.
const first = await cost(true, 20_000);
const plain = await cost(false, 100_000);
const traced = await cost(true, 100_000);
console.log(JSON.stringify({
  first_20000_spans_us: first,
  async_noop_us: plain,
  with_a_span_us: traced,
  span_us: Math.round((traced - plain) * 10) / 10,
}));
