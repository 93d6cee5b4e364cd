//! OpenTelemetry, with the feature `otel`: an enqueue sends the current context's span along
//! with the job (`trace_context`, a W3C traceparent the server keeps until the claim), and the
//! Worker runs each attempt in a consumer span that is its child — one trace from the producer's
//! request to the handler, as OpenTelemetry's messaging conventions have it for a single
//! message. Without the feature every function here does nothing, and `Attempt` is empty.
use std::future::Future;

use crate::client::Job;

/// The current context's span as a W3C traceparent, or `None` (no feature, or no valid span).
pub(crate) fn traceparent() -> Option<String> {
    #[cfg(feature = "otel")]
    {
        use opentelemetry::trace::TraceContextExt;
        let context = opentelemetry::Context::current();
        let span = context.span().span_context().clone();
        span.is_valid().then(|| {
            format!(
                "00-{}-{}-{:02x}",
                span.trace_id(),
                span.span_id(),
                span.trace_flags().to_u8()
            )
        })
    }
    #[cfg(not(feature = "otel"))]
    None
}

/// One attempt's span, from its start to what became of it.
pub(crate) struct Attempt {
    #[cfg(feature = "otel")]
    context: opentelemetry::Context,
}

/// Outcomes that mark an attempt's span as an error.
#[cfg(feature = "otel")]
const ERRORS: [&str; 6] = ["fail", "retry", "dead", "lost", "fenced", "abandoned"];

impl Attempt {
    /// Starts the span of one attempt of `job`: a child of the producer's context when the job
    /// has one, else a new trace.
    pub(crate) fn start(job: &Job) -> Attempt {
        #[cfg(feature = "otel")]
        {
            use opentelemetry::KeyValue;
            use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer};
            let parent = match job.trace_context.as_deref().and_then(producer) {
                Some(producer) => opentelemetry::Context::new().with_remote_span_context(producer),
                None => opentelemetry::Context::new(),
            };
            let tracer = opentelemetry::global::tracer("leaseq");
            let span = tracer
                .span_builder(format!("{} process", job.queue))
                .with_kind(SpanKind::Consumer)
                .with_attributes([
                    KeyValue::new("messaging.system", "leaseq"),
                    KeyValue::new("messaging.operation.type", "process"),
                    KeyValue::new("messaging.destination.name", job.queue.clone()),
                    KeyValue::new("messaging.message.id", job.id.to_string()),
                    KeyValue::new("leaseq.job_id", job.id),
                    KeyValue::new("leaseq.queue", job.queue.clone()),
                    KeyValue::new("leaseq.attempt", i64::from(job.attempt_no)),
                ])
                .start_with_context(&tracer, &parent);
            Attempt {
                context: parent.with_span(span),
            }
        }
        #[cfg(not(feature = "otel"))]
        {
            let _ = job;
            Attempt {}
        }
    }

    /// `f()` with the attempt's span current: a handler's synchronous part, before its future.
    pub(crate) fn call<R>(&self, f: impl FnOnce() -> R) -> R {
        #[cfg(feature = "otel")]
        let _current = self.context.clone().attach();
        f()
    }

    /// `work` with the attempt's span current, so that the handler's own spans are its children.
    pub(crate) fn within<F: Future>(&self, work: F) -> impl Future<Output = F::Output> {
        #[cfg(feature = "otel")]
        {
            opentelemetry::trace::FutureExt::with_context(work, self.context.clone())
        }
        #[cfg(not(feature = "otel"))]
        work
    }

    /// Ends the span with what became of the attempt (`kind`: complete, fail, retry, dead,
    /// snooze, finished, lost, fenced, abandoned): an error status, with `error` (the failure's
    /// document), unless it completed, snoozed or was finished by its handler.
    pub(crate) fn end(self, kind: &'static str, error: Option<&str>) {
        #[cfg(feature = "otel")]
        {
            use opentelemetry::trace::{Status, TraceContextExt};
            let span = self.context.span();
            span.set_attribute(opentelemetry::KeyValue::new("leaseq.outcome", kind));
            if ERRORS.contains(&kind) {
                span.set_status(Status::error(error.unwrap_or(kind).to_string()));
            }
            span.end();
        }
        #[cfg(not(feature = "otel"))]
        let _ = (kind, error);
    }
}

/// The span context a traceparent names (remote, as a producer's is).
#[cfg(feature = "otel")]
fn producer(traceparent: &str) -> Option<opentelemetry::trace::SpanContext> {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    let mut parts = traceparent.split('-').skip(1);
    let trace_id = TraceId::from_hex(parts.next()?).ok()?;
    let span_id = SpanId::from_hex(parts.next()?).ok()?;
    let flags = u8::from_str_radix(parts.next()?, 16).ok()?;
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    ))
}
