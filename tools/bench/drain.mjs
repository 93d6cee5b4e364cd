// leaseq-bench section 15: the Node Worker (a no-op async handler) drains the queue `bench` with
// CONCURRENCY slots (PREFETCH jobs held beyond them, claims of BATCH, when given) until nothing is
// due, then prints what it did and its CPU time. LEASEQ_BENCH_LOG=INFO logs info lines (the run's
// start and end) to stderr; LEASEQ_BENCH_OTEL=1 runs under OpenTelemetry's SDK, its spans exported
// to nowhere. LEASEQ_BENCH_NODE_CLIENT: another build of the client to measure (a baseline's).
const leaseq = await import(process.env.LEASEQ_BENCH_NODE_CLIENT ?? "../../clients/node/dist/esm/index.js");
if (process.env.LEASEQ_BENCH_OTEL === "1") {
  const { createRequire } = await import("node:module");
  const require = createRequire(new URL("../../clients/node/package.json", import.meta.url));
  const api = require("@opentelemetry/api");
  const { AsyncLocalStorageContextManager } = require("@opentelemetry/context-async-hooks");
  const { BasicTracerProvider, BatchSpanProcessor } = require("@opentelemetry/sdk-trace-base");
  const nowhere = { export: (_spans, done) => done({ code: 0 }), shutdown: async () => {} };
  api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  api.trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(nowhere)] }));
}

const stderr = (message, fields) => console.error(message, fields ?? "");
const worker = new leaseq.Worker({
  connectionString: process.env.DATABASE_URL,
  queue: "bench",
  concurrency: Number(process.env.CONCURRENCY ?? 16),
  prefetch: Number(process.env.PREFETCH ?? 0),
  batch: process.env.BATCH ? Number(process.env.BATCH) : undefined,
  handler: async () => null,
  // INFO and up on stderr (stdout is the report's).
  ...(process.env.LEASEQ_BENCH_LOG === "INFO" ? { logger: { info: stderr, warn: stderr, error: stderr } } : {}),
});
const summary = await worker.runUntilIdle();
const { user, system } = process.cpuUsage();
console.log(JSON.stringify({ completed: summary.completed, cpu_seconds: (user + system) / 1e6 }));
