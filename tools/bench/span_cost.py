"""What one consumer span costs in OpenTelemetry's Python SDK alone, as the Worker makes it per
attempt (TracerProvider, BatchSpanProcessor, an exporter to nowhere): CPU µs per span, started and
ended, with leaseq's seven attributes and the outcome, made current as the Worker does
(`leaseq._otel.consumer_span`), through `start_as_current_span`, not current, and with no
attribute. Section 15's Python drain costs its client about 40–70 µs a job without tracing
(docs/benchmarks.md): this is the floor tracing adds to it, whatever the Worker does."""

import json
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import SpanKind

from leaseq import _otel
from leaseq.types import Job


class Nowhere(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(Nowhere()))
trace.set_tracer_provider(provider)
tracer = provider.get_tracer("leaseq")
JOB = Job(1, "bench", uuid.uuid4(), 1, "{}", 0, datetime.now(timezone.utc), 30.0, "1-1")
LEASEQ = {
    "messaging.system": "leaseq", "messaging.operation.type": "process",
    "messaging.destination.name": "bench", "messaging.message.id": "1",
    "leaseq.job_id": 1, "leaseq.queue": "bench", "leaseq.attempt": 1,
}


def cost(attributes: dict[str, object] | None, current: bool | str, n: int = 50_000) -> float:
    def one() -> None:
        if current == "worker":
            with _otel.consumer_span(tracer, JOB) as span:
                _otel.outcome(span, "complete")
        elif current:
            with tracer.start_as_current_span("bench process", kind=SpanKind.CONSUMER,
                                              attributes=attributes, record_exception=False,
                                              set_status_on_exception=False) as span:
                span.set_attribute("leaseq.outcome", "complete")
        else:
            span = tracer.start_span("bench process", kind=SpanKind.CONSUMER, attributes=attributes)
            span.set_attribute("leaseq.outcome", "complete")
            span.end()

    for _ in range(n // 10):
        one()
    start = time.process_time()
    for _ in range(n):
        one()
    return (time.process_time() - start) / n * 1e6


print(json.dumps({
    "as_the_worker_does_us": round(cost(LEASEQ, "worker"), 1),
    "leaseq_attributes_start_as_current_span_us": round(cost(LEASEQ, True), 1),
    "leaseq_attributes_not_current_us": round(cost(LEASEQ, False), 1),
    "no_attributes_not_current_us": round(cost(None, False), 1),
}))
