// What one consumer span costs in OpenTelemetry's Node SDK alone, as the Worker makes it per
// attempt (BasicTracerProvider, BatchSpanProcessor, an exporter to nowhere, the
// AsyncLocalStorage context manager): CPU µs per span started, made current around an async
// no-op, and ended, with leaseq's seven attributes and the outcome. Section 15's Node drain costs
// its client about 24 µs a job with prefetch and 60 at defaults without tracing
// (docs/benchmarks.md): this is the floor tracing adds to it, whatever the Worker does.
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

async function cost(traced, n = 100_000) {
  for (let i = 0; i < n / 10; i++) await one(traced);
  const before = process.cpuUsage();
  for (let i = 0; i < n; i++) await one(traced);
  const used = process.cpuUsage(before);
  return Math.round(((used.user + used.system) / n) * 10) / 10;
}

const plain = await cost(false);
const traced = await cost(true);
console.log(JSON.stringify({ async_noop_us: plain, with_a_span_us: traced, span_us: Math.round((traced - plain) * 10) / 10 }));
