"""OpenTelemetry, used only when its API is installed (`pip install "leaseq[otel]"`): an enqueue
sends the current span's context along with the job (`trace_context`, a W3C traceparent, kept
by the server until the claim), and the Worker runs each attempt in a consumer span that is its
child — one trace from the producer's request to the handler, as OpenTelemetry's messaging
conventions have it for a single message. Without the API every function here does nothing."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .types import Job

try:
    from opentelemetry import context as _context
    from opentelemetry import trace as _trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    _PROPAGATOR: Any = TraceContextTextMapPropagator()
    #: The API's own providers: until an SDK's is set, spans would record nothing.
    _NO_SDK: Any = (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider)
except ImportError:  # the API is optional: no tracing
    _trace = None  # type: ignore[assignment]


def tracer() -> Any:
    """leaseq's tracer when spans are worth making — the API is installed and an SDK's provider
    is set (the API alone makes spans that record nothing, at a cost per job) — else None. Asked
    once per claim: the API reads the environment each time, and an SDK's `get_tracer` costs
    more than the span it starts."""
    global _tracer
    if _trace is None:
        return None
    provider = _trace.get_tracer_provider()
    if isinstance(provider, _NO_SDK):
        return None
    if _tracer is None or _tracer[0] is not provider:
        _tracer = (provider, provider.get_tracer("leaseq"))
    return _tracer[1]


#: The last provider set, and its tracer.
_tracer: tuple[Any, Any] | None = None

#: Outcomes that mark an attempt's span as an error.
_ERRORS = frozenset({"fail", "retry", "dead", "lost", "fenced", "timed_out"})


def traceparent() -> str | None:
    """The current span's context as a W3C traceparent, or None (no API, or no valid span)."""
    if _trace is None:
        return None
    context = _trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


#: What a Worker enters instead of `consumer_span` when `tracer()` said None.
NO_SPAN: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()


class consumer_span:  # noqa: N801 (entered like the context manager it replaced)
    """The span of one attempt of `job`, by `tracer` (`tracer()`'s), current while it is open (a
    sync handler's thread gets a copy of the context): a child of the producer's context when
    the job has one, else a new trace. A class, not `start_as_current_span`: its three nested
    generator context managers cost a traced job more than a quarter of its span."""

    __slots__ = ("span", "token")

    def __init__(self, tracer: Any, job: Job) -> None:
        parent = (
            None
            if job.trace_context is None
            else _PROPAGATOR.extract({"traceparent": job.trace_context})
        )
        self.span = tracer.start_span(
            f"{job.queue} process",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "leaseq",
                "messaging.operation.type": "process",
                "messaging.destination.name": job.queue,
                "messaging.message.id": str(job.id),
                "leaseq.job_id": job.id,
                "leaseq.queue": job.queue,
                "leaseq.attempt": job.attempt,
            },
            record_exception=False,
            set_status_on_exception=False,
        )

    def __enter__(self) -> Any:
        self.token = _context.attach(_trace.set_span_in_context(self.span))
        return self.span

    def __exit__(self, *_: object) -> None:
        _context.detach(self.token)
        self.span.end()


def outcome(span: Any, kind: str, error: BaseException | None = None) -> None:
    """Records on the attempt's `span` (None: not traced) what became of the attempt (`kind`:
    complete, fail, retry, dead, snooze, lost, fenced, timed_out): an error status, with the
    handler's exception, unless it completed or snoozed."""
    if span is None:
        return
    span.set_attribute("leaseq.outcome", kind)
    if error is not None:
        span.record_exception(error)
    if kind in _ERRORS:
        span.set_status(Status(StatusCode.ERROR, kind if error is None else str(error)))
