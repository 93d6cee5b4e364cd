// OpenTelemetry, end to end through the server: an enqueue in a span keeps that span's context
// (the job's `traceContext`), and the Worker runs each attempt in a consumer span that is its
// child — same trace, the producer's span its parent — with the job's attributes and the outcome
// as its status. Read back through the SDK's in-memory exporter.
import assert from "node:assert/strict";
import { test } from "node:test";

import { context, SpanKind, SpanStatusCode, trace } from "@opentelemetry/api";
import pg from "pg";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";

import * as leaseq from "../dist/esm/index.js";
import { newQueue, runBounded, url, withClient, withPg } from "./helpers.mjs";

const exporter = new InMemorySpanExporter();
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));

function attemptOf(jobId) {
  const found = exporter
    .getFinishedSpans()
    .filter((s) => s.kind === SpanKind.CONSUMER && s.attributes["leaseq.job_id"] === jobId);
  assert.equal(found.length, 1, JSON.stringify(exporter.getFinishedSpans().map((s) => s.name)));
  return found[0];
}

test("the worker's span is a child of the producer's, with the job's attributes", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const producer = trace.getTracer("the producer");
    let jobId, produced;
    await producer.startActiveSpan("POST /orders", async (span) => {
      produced = span.spanContext();
      // In the caller's transaction, on its own pg client.
      jobId = await withPg(async (pg) => {
        await pg.query("BEGIN");
        const id = await leaseq.enqueue(pg, queue, { order: 7 });
        await pg.query("COMMIT");
        return id;
      });
      span.end();
    });
    const summary = await runBounded(
      new leaseq.Worker({
        connectionString: url,
        queue,
        handler: () =>
          trace.getTracer("the handler").startActiveSpan("send email", (inner) => {
            inner.end();
            return { sent: true };
          }),
      }),
    );
    assert.equal(summary.completed, 1);
    const span = attemptOf(jobId);
    assert.equal(span.spanContext().traceId, produced.traceId);
    assert.equal(span.parentSpanContext?.spanId, produced.spanId);
    assert.equal(span.name, `${queue} process`);
    assert.deepEqual(span.attributes, {
      "messaging.system": "leaseq",
      "messaging.operation.type": "process",
      "messaging.destination.name": queue,
      "messaging.message.id": jobId,
      "leaseq.job_id": jobId,
      "leaseq.queue": queue,
      "leaseq.attempt": 1,
      "leaseq.outcome": "complete",
    });
    assert.equal(span.status.code, SpanStatusCode.UNSET);
    const inner = exporter.getFinishedSpans().filter((s) => s.name === "send email");
    assert.equal(inner.length, 1);
    assert.equal(inner[0].parentSpanContext?.spanId, span.spanContext().spanId);
  }));

test("a failed attempt is an error span with the exception; transactional ones are traced too", () =>
  withClient(async (client) => {
    const queue = await newQueue(client, { maxAttempts: 1 });
    let dying, fine, traceId;
    await trace.getTracer("the producer").startActiveSpan("batch", async (span) => {
      traceId = span.spanContext().traceId;
      [dying, fine] = await client.enqueueBatch(queue, [{ do: "throw" }, { do: "ok" }]);
      span.end();
    });
    const untraced = await client.enqueue(queue, { do: "ok" });
    await runBounded(
      new leaseq.Worker({
        connectionString: url,
        queue,
        transactional: true,
        handler: async (job, { tx }) => {
          await tx.query("SELECT 1");
          if (job.payload.do === "throw") throw new Error("the upstream said no");
          return null;
        },
      }),
    );
    const failed = attemptOf(dying);
    assert.equal(failed.status.code, SpanStatusCode.ERROR);
    assert.equal(failed.attributes["leaseq.outcome"], "dead");
    assert.deepEqual(failed.events.map((e) => e.name), ["exception"]);
    assert.equal(failed.spanContext().traceId, traceId);
    assert.equal(attemptOf(fine).spanContext().traceId, traceId);
    assert.equal(attemptOf(fine).attributes["leaseq.outcome"], "complete");
    assert.equal(attemptOf(untraced).parentSpanContext, undefined, "a root span: no producer context");
  }));

test("the trace context is kept exactly, and a malformed one is refused changing nothing", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const id = await client.enqueue(queue, {}, { traceContext: given });
    const [claimed] = await client.claim(queue, "w", 1);
    assert.deepEqual([claimed.id, claimed.traceContext], [id, given]);
    for (const bad of ["", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1", "x"]) {
      for (const call of [
        () => client.enqueue(queue, {}, { traceContext: bad }),
        () => client.enqueueBatch(queue, [{}], { traceContext: bad }),
        () => client.flow([{ key: "a", queue }], bad),
      ]) {
        await assert.rejects(call, (e) => {
          assert.ok(e instanceof leaseq.InvalidArgument, String(e));
          assert.equal(e.sqlstate, "22023");
          assert.match(e.message, /argument "trace_context" must be a W3C traceparent/);
          return true;
        });
      }
    }
    const { rows } = await withPg((pg) => pg.query("SELECT count(*)::int AS n FROM leaseq.jobs WHERE queue = $1", [queue]));
    assert.equal(rows[0].n, 1, "the refused enqueues added nothing");
  }));

test("in a span, a database not yet updated still enqueues and works, untraced", () =>
  withPg(async (c) => {
    // 0.2.0's definitions know no trace context: the span's is left out, never an error.
    const old = `node_traced_at_020_${process.pid}`;
    await c.query(`DROP DATABASE IF EXISTS ${old}`);
    await c.query(`CREATE DATABASE ${old}`);
    try {
      const oldUrl = new URL(url);
      oldUrl.pathname = `/${old}`;
      const setup = new pg.Client({ connectionString: oldUrl.toString() });
      await setup.connect();
      try {
        await setup.query("CREATE EXTENSION leaseq VERSION '0.2.0'");
        await setup.query("SELECT leaseq.queue_create('node_old')");
      } finally {
        await setup.end();
      }
      const client = new leaseq.Client(oldUrl.toString());
      let ids;
      try {
        ids = await trace.getTracer("the producer").startActiveSpan("old", async (span) => {
          const found = [await client.enqueue("node_old", {}), ...(await client.enqueueBatch("node_old", [{}]))];
          span.end();
          return found;
        });
      } finally {
        await client.close();
      }
      const summary = await runBounded(
        new leaseq.Worker({ connectionString: oldUrl.toString(), queue: "node_old", handler: () => null }),
      );
      assert.equal(summary.completed, 2);
      for (const id of ids) assert.equal(attemptOf(id).parentSpanContext, undefined);
    } finally {
      await c.query(`DROP DATABASE ${old} WITH (FORCE)`);
    }
  }));

test("a schedule's ticks carry the context it was made in", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    let made;
    await trace.getTracer("the operator").startActiveSpan("deploy", async (span) => {
      made = span.spanContext();
      await client.schedule(`${queue}_tick`, queue, "* * * * *", { tick: true });
      span.end();
    });
    await withPg((pg) =>
      pg.query("UPDATE leaseq.schedules SET next_at = now() - interval '1 minute' WHERE name = $1", [`${queue}_tick`]),
    );
    const [tick] = await client.claim(queue, "w", 1);
    const flags = made.traceFlags.toString(16).padStart(2, "0");
    assert.equal(tick.traceContext, `00-${made.traceId}-${made.spanId}-${flags}`);
  }));
