"""OpenTelemetry, end to end through the server: an enqueue in a span keeps that span's context
(the job's `trace_context`), and the Worker runs each attempt in a consumer span that is its
child — same trace, the producer's span its parent — with the job's attributes and the outcome as
its status. Read back through the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import leaseq
import leaseq.aio
from conftest import run_bounded

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans ended during the test (one provider for the process: OpenTelemetry's global
    provider can be set once)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER


def consumer(exported: InMemorySpanExporter, job_id: int) -> ReadableSpan:
    found = [s for s in exported.get_finished_spans()
             if s.kind is SpanKind.CONSUMER and (s.attributes or {}).get("leaseq.job_id") == job_id]
    assert len(found) == 1, exported.get_finished_spans()
    return found[0]


def test_the_workers_span_is_a_child_of_the_producers_with_the_jobs_attributes(
    url: str, client: leaseq.Client, queue: str, spans: InMemorySpanExporter
) -> None:
    tracer = trace.get_tracer("the producer")
    with tracer.start_as_current_span("POST /orders") as producer:
        with psycopg.connect(url) as conn:  # in the caller's transaction
            job_id = leaseq.enqueue(conn, queue, {"order": 7})
    assert client.job(job_id).status is leaseq.JobStatus.PENDING

    def handler(job: leaseq.Job) -> Any:
        # The handler's own spans are children of the attempt's.
        with trace.get_tracer("the handler").start_as_current_span("send email"):
            return {"sent": True}

    summary = run_bounded(leaseq.Worker(url, queue=queue, handler=handler, concurrency=2))
    assert summary.completed == 1
    span = consumer(spans, job_id)
    produced = producer.get_span_context()
    assert span.context is not None and span.parent is not None
    assert span.context.trace_id == produced.trace_id
    assert span.parent.span_id == produced.span_id
    assert span.name == f"{queue} process"
    assert dict(span.attributes or {}) == {
        "messaging.system": "leaseq",
        "messaging.operation.type": "process",
        "messaging.destination.name": queue,
        "messaging.message.id": str(job_id),
        "leaseq.job_id": job_id,
        "leaseq.queue": queue,
        "leaseq.attempt": 1,
        "leaseq.outcome": "complete",
    }
    assert span.status.status_code is StatusCode.UNSET
    inner = [s for s in spans.get_finished_spans() if s.name == "send email"]
    assert len(inner) == 1 and inner[0].parent is not None
    assert inner[0].parent.span_id == span.context.span_id


def test_a_failed_attempt_is_an_error_span_with_the_exception_and_each_attempt_its_own(
    url: str, client: leaseq.Client, queue: str, spans: InMemorySpanExporter
) -> None:
    client.queue_create(queue, max_attempts=1)
    with trace.get_tracer("the producer").start_as_current_span("batch") as producer:
        dying, fine = client.enqueue_batch(queue, [{"do": "raise"}, {"do": "ok"}])

    def handler(job: leaseq.Job) -> Any:
        if job.payload["do"] == "raise":
            raise ValueError("the upstream said no")
        return None

    run_bounded(leaseq.Worker(url, queue=queue, handler=handler, concurrency=2))
    failed = consumer(spans, dying)
    assert failed.status.status_code is StatusCode.ERROR
    assert (failed.attributes or {})["leaseq.outcome"] == "dead"
    assert [e.name for e in failed.events] == ["exception"]
    assert (failed.events[0].attributes or {})["exception.type"] == "ValueError"
    trace_id = producer.get_span_context().trace_id
    assert {consumer(spans, i).context.trace_id for i in (dying, fine)} == {trace_id}


def test_a_job_enqueued_outside_any_span_starts_its_own_trace_and_transactional_ones_trace(
    url: str, client: leaseq.Client, queue: str, spans: InMemorySpanExporter
) -> None:
    job_id = client.enqueue(queue, {})
    (peeked,) = client.claim(queue, "peek", 1)
    assert (peeked.id, peeked.trace_context) == (job_id, None)
    other = client.enqueue(queue, {})

    def handler(job: leaseq.Job, conn: psycopg.Connection[Any]) -> Any:
        conn.execute("SELECT 1")
        return None

    run_bounded(leaseq.Worker(url, queue=queue, handler=handler, transactional=True))
    span = consumer(spans, other)
    assert span.parent is None, "a root span: no producer context"
    assert (span.attributes or {})["leaseq.outcome"] == "complete"


def test_the_trace_context_is_kept_exactly_and_a_malformed_one_is_refused_changing_nothing(
    url: str, client: leaseq.Client, conn: psycopg.Connection[Any], queue: str
) -> None:
    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    job_id = client.enqueue(queue, {}, trace_context=given)
    (claimed,) = client.claim(queue, "w", 1)
    assert (claimed.id, claimed.trace_context) == (job_id, given)
    for bad in ["", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
                "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                "00-00000000000000000000000000000000-b7ad6b7169203331-01",
                "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01"]:
        with pytest.raises(leaseq.InvalidArgument) as refused:
            client.enqueue(queue, {}, trace_context=bad)
        assert refused.value.sqlstate == "22023"
        assert 'argument "trace_context" must be a W3C traceparent' in str(refused.value)
        with pytest.raises(leaseq.InvalidArgument):
            client.enqueue_batch(queue, [{}], trace_context=bad)
        with pytest.raises(leaseq.InvalidArgument):
            client.flow([{"key": "a", "queue": queue}], trace_context=bad)
    row = conn.execute("SELECT count(*) FROM leaseq.jobs WHERE queue = %s", (queue,)).fetchone()
    assert row == (1,), "the refused enqueues added nothing"


def test_the_asyncio_client_sends_the_current_spans_context(
    url: str, queue: str, spans: InMemorySpanExporter
) -> None:
    async def enqueue_and_claim() -> tuple[int, leaseq.Job, trace.Span]:
        async with await leaseq.aio.AsyncClient.connect(url) as client:
            with trace.get_tracer("the producer").start_as_current_span("async") as producer:
                job_id = await client.enqueue(queue, {})
            (claimed,) = await client.claim(queue, "w", 1)
        return job_id, claimed, producer

    job_id, claimed, producer = asyncio.run(enqueue_and_claim())
    context = producer.get_span_context()
    assert claimed.id == job_id
    flags = int(context.trace_flags)
    assert claimed.trace_context == f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"


def test_in_a_span_a_database_not_yet_updated_still_enqueues_and_works_untraced(
    url: str, conn: psycopg.Connection[Any], spans: InMemorySpanExporter
) -> None:
    # 0.2.0's definitions know no trace context: the span's is left out, never an error.
    old = f"py_traced_at_020_{os.getpid()}"
    conn.execute(f"DROP DATABASE IF EXISTS {old}")
    conn.execute(f"CREATE DATABASE {old}")
    try:
        old_url = psycopg.conninfo.make_conninfo(url, dbname=old)
        with psycopg.connect(old_url, autocommit=True) as setup:
            setup.execute("CREATE EXTENSION leaseq VERSION '0.2.0'")
            setup.execute("SELECT leaseq.queue_create('py_old')")
        with trace.get_tracer("the producer").start_as_current_span("old"):
            with leaseq.Client(old_url) as client:
                ids = [client.enqueue("py_old", {}), *client.enqueue_batch("py_old", [{}])]
            with psycopg.connect(old_url) as own:  # in the caller's transaction
                ids.append(leaseq.enqueue(own, "py_old", {}))
        summary = run_bounded(leaseq.Worker(old_url, queue="py_old", handler=lambda job: None))
        assert summary.completed == 3
        assert all(consumer(spans, i).parent is None for i in ids)
    finally:
        conn.execute(f"DROP DATABASE {old} WITH (FORCE)")


def test_a_schedules_ticks_carry_the_context_it_was_made_in(
    client: leaseq.Client, conn: psycopg.Connection[Any], queue: str, spans: InMemorySpanExporter
) -> None:
    with trace.get_tracer("the operator").start_as_current_span("deploy") as made:
        client.schedule(f"{queue}_tick", queue, "* * * * *", {"tick": True})
    conn.execute("UPDATE leaseq.schedules SET next_at = now() - interval '1 minute' WHERE name = %s",
                 (f"{queue}_tick",))
    (tick,) = client.claim(queue, "w", 1)
    context = made.get_span_context()
    assert tick.trace_context == (
        f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
    )
