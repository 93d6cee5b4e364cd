"""leaseq-bench section 15: the Python Worker (asyncio, a no-op async handler) drains the queue
`bench` with CONCURRENCY slots (PREFETCH jobs held beyond them, claims of BATCH, when given) until
nothing is due, then prints what it did and its CPU time. LEASEQ_BENCH_LOG=INFO logs to stderr at
that level; LEASEQ_BENCH_OTEL=1 runs under OpenTelemetry's SDK, its spans exported to nowhere."""

import json
import logging
import os
import resource

import leaseq

if "LEASEQ_BENCH_LOG" in os.environ:
    logging.basicConfig(level=os.environ["LEASEQ_BENCH_LOG"])
if os.environ.get("LEASEQ_BENCH_OTEL") == "1":
    from collections.abc import Sequence

    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Nowhere(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Nowhere()))
    trace.set_tracer_provider(provider)


async def noop(job: leaseq.Job) -> None:
    return None


worker = leaseq.Worker(
    os.environ["DATABASE_URL"],
    queue="bench",
    handler=noop,
    concurrency=int(os.environ.get("CONCURRENCY", "16")),
    prefetch=int(os.environ.get("PREFETCH", "0")),
    batch=int(os.environ["BATCH"]) if "BATCH" in os.environ else None,
)
summary = worker.run_until_idle()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"completed": summary.completed, "cpu_seconds": usage.ru_utime + usage.ru_stime}))
