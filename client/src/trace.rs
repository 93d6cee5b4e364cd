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

/// leaseq's tracer from the global provider, taken once per claim and shared by its jobs: an
/// SDK's `global::tracer` builds a new tracer, its scope and all, on every call.
#[derive(Clone)]
pub(crate) struct Tracer {
    #[cfg(feature = "otel")]
    tracer: std::sync::Arc<opentelemetry::global::BoxedTracer>,
}

impl Tracer {
    pub(crate) fn current() -> Tracer {
        Tracer {
            #[cfg(feature = "otel")]
            tracer: std::sync::Arc::new(opentelemetry::global::tracer("leaseq")),
        }
    }
}

/// One attempt's span, from its start to what became of it.
pub(crate) struct Attempt {
    #[cfg(feature = "otel")]
    context: opentelemetry::Context,
}

/// Whether the last attempt's span recorded (an SDK's provider is set).
#[cfg(feature = "otel")]
static RECORDING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Outcomes that mark an attempt's span as an error.
#[cfg(feature = "otel")]
const ERRORS: [&str; 6] = ["fail", "retry", "dead", "lost", "fenced", "abandoned"];

impl Attempt {
    /// Starts the span of one attempt of `job`: a child of the producer's context when the job
    /// has one, else a new trace.
    pub(crate) fn start(job: &Job, tracer: &Tracer) -> Attempt {
        #[cfg(feature = "otel")]
        {
            use opentelemetry::KeyValue;
            use opentelemetry::trace::{Span, SpanKind, TraceContextExt, Tracer};
            use std::sync::atomic::Ordering::Relaxed;
            let parent = match job.trace_context.as_deref().and_then(producer) {
                Some(producer) => opentelemetry::Context::new().with_remote_span_context(producer),
                None => opentelemetry::Context::new(),
            };
            let tracer = &*tracer.tracer;
            let attributes = || {
                [
                    KeyValue::new("messaging.system", "leaseq"),
                    KeyValue::new("messaging.operation.type", "process"),
                    KeyValue::new("messaging.destination.name", job.queue.clone()),
                    KeyValue::new("messaging.message.id", job.id.to_string()),
                    KeyValue::new("leaseq.job_id", job.id),
                    KeyValue::new("leaseq.queue", job.queue.clone()),
                    KeyValue::new("leaseq.attempt", i64::from(job.attempt_no)),
                ]
            };
            let name = || format!("{} process", job.queue);
            // With no SDK set the spans record nothing: past the first, they are started bare.
            // One that records after all (an SDK set since) gets its name and attributes then.
            let was_recording = RECORDING.load(Relaxed);
            let builder = if was_recording {
                tracer.span_builder(name()).with_attributes(attributes())
            } else {
                tracer.span_builder("process")
            };
            let mut span = builder
                .with_kind(SpanKind::Consumer)
                .start_with_context(tracer, &parent);
            let recording = span.is_recording();
            if recording && !was_recording {
                span.update_name(name());
                span.set_attributes(attributes());
            }
            if recording != was_recording {
                RECORDING.store(recording, Relaxed);
            }
            Attempt {
                context: parent.with_span(span),
            }
        }
        #[cfg(not(feature = "otel"))]
        {
            let _ = (job, tracer);
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

#[cfg(all(test, feature = "otel"))]
mod tests {
    use super::*;
    use opentelemetry::Value;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

    fn job(id: i64) -> Job {
        Job {
            id,
            key: format!("{id}-1"),
            queue: "mail".into(),
            lease_token: uuid::Uuid::nil(),
            attempt_no: 1,
            payload: "{}".into(),
            priority: 0,
            lease_left: std::time::Duration::from_secs(30),
            trace_context: None,
        }
    }

    /// Spans are started bare once they record nothing (no SDK): one that records after all, an
    /// SDK set since (seen by the next claim's tracer), still gets its name and every attribute.
    #[test]
    fn an_attempt_after_an_sdk_is_set_has_its_name_and_attributes() {
        // no SDK yet: records nothing
        Attempt::start(&job(1), &Tracer::current()).end("complete", None);
        assert!(!RECORDING.load(std::sync::atomic::Ordering::Relaxed));
        let exporter = InMemorySpanExporter::default();
        opentelemetry::global::set_tracer_provider(
            SdkTracerProvider::builder()
                .with_simple_exporter(exporter.clone())
                .build(),
        );
        Attempt::start(&job(2), &Tracer::current()).end("complete", None);
        let spans = exporter.get_finished_spans().unwrap();
        let span = spans.last().expect("the attempt's span");
        let attribute = |key: &str| {
            span.attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value.clone())
        };
        assert_eq!(span.name, "mail process");
        assert_eq!(attribute("leaseq.job_id"), Some(Value::from(2_i64)));
        assert_eq!(attribute("leaseq.queue"), Some(Value::from("mail")));
        assert_eq!(
            attribute("messaging.destination.name"),
            Some(Value::from("mail"))
        );
        assert_eq!(attribute("leaseq.outcome"), Some(Value::from("complete")));
    }
}
