//! Typed calls of the extension's SQL functions. Every value crosses as a parameter; JSON stays
//! text end to end (`$n::text::jsonb` in, `payload::text` out), so payloads arrive exactly as
//! enqueued. Leases are reported as the time left, measured by the server's clock. Every column
//! is decoded with `try_get`: a column that does not decode is an error, never a default.
//! The statements run on the caller's search_path: an operator whose operand types pg_catalog
//! has no exact match for (`bigint * interval`) is written `OPERATOR(pg_catalog.*)`, and
//! PostgreSQL's functions are `pg_catalog.`-qualified, so that nothing planted in public is ever
//! run (docs/security.md).
//! The read-only views (`jobs`, `job`, `attempts`) are in `inspect`, where JSON documents arrive
//! as the server's own text too (`RawValue`).
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::StreamExt;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, Row, Statement};

use crate::enums::ParentFailure;
pub use uuid::Uuid;

pub type Error = tokio_postgres::Error;

/// An error as the server said it: its message and SQLSTATE for a database error (such as
/// `permission denied for schema leaseq (SQLSTATE 42501)`), where tokio-postgres's own text is
/// just "db error" — with what to do when the database lacks the extension; otherwise the
/// error's text with every cause below it (tokio-postgres says only "error connecting to
/// server": the cause says refused, timed out or unresolvable).
pub fn describe(e: &Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut said = format!("{} (SQLSTATE {})", db.message(), db.code().code());
        if *db.code() == SqlState::INVALID_SCHEMA_NAME && db.message().contains("\"leaseq\"") {
            said.push_str(
                "; leaseq is not installed in this database: run CREATE EXTENSION leaseq in it \
                 (as a superuser)",
            );
        }
        return said;
    }
    let mut said = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        said.push_str(": ");
        said.push_str(&c.to_string());
        cause = c.source();
    }
    said
}

/// Where `url` connects, for messages: `host:port/database as user` (each part as the URL gives
/// it, or PostgreSQL's default).
pub fn connect_target(url: &str) -> String {
    let Ok(config) = crate::tls::parse_config(url) else {
        return "an unreadable connection string".into();
    };
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let host = match host {
                tokio_postgres::config::Host::Tcp(name) => name.clone(),
                tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
            };
            let port = config.get_ports().get(i).or(config.get_ports().first());
            format!("{host}:{}", port.copied().unwrap_or(5432))
        })
        .collect();
    let user = config.get_user().unwrap_or("the default user");
    let hosts = if hosts.is_empty() {
        "no host".into()
    } else {
        hosts.join(",")
    };
    match config.get_dbname() {
        Some(db) => format!("{hosts}/{db} as {user}"),
        None => format!("{hosts} as {user}"),
    }
}

/// A connection to a database with the leaseq extension.
pub struct Client {
    pg: tokio_postgres::Client,
    /// The job path's statements, prepared once per connection: an unprepared query costs a
    /// second round trip, and the server a parse and plan of its SELECT, on every call.
    prepared: Mutex<HashMap<&'static str, Statement>>,
    /// Whether the database keeps trace contexts (0.3.0 on): asked once, when a call first
    /// carries the current span's; and whether its claim returns them (told by the claim).
    keeps_traces: Mutex<Option<bool>>,
    claims_untraced: std::sync::atomic::AtomicBool,
}

/// A claimed job: what a handler gets, and what its worker needs to renew and finish it.
#[derive(Clone, Debug)]
pub struct Job {
    pub id: i64,
    /// The job's key, `<id>-<the microsecond it was enqueued>`: unlike the id, no other job
    /// has it, even after a failover to an asynchronous standby that lost acknowledged jobs and
    /// then issued their ids again. Key idempotency downstream on it.
    pub key: String,
    pub queue: String,
    pub lease_token: Uuid,
    /// Strictly increasing per job for ever: the fencing generation to pass downstream.
    pub attempt_no: i32,
    /// The payload's JSON text, exactly as stored.
    pub payload: String,
    pub priority: i32,
    /// How long the lease had left when the server granted it.
    pub lease_left: Duration,
    /// The W3C traceparent its producer enqueued it with: the Worker's span for the attempt
    /// (feature `otel`) is its child.
    pub trace_context: Option<String>,
}

/// The optional arguments of `queue_enqueue`.
#[derive(Clone, Debug, Default)]
pub struct EnqueueOptions {
    /// A timestamptz literal (`2026-12-01 09:00+00`); `None` means now.
    pub run_at: Option<String>,
    pub priority: i32,
    pub dedupe_key: Option<String>,
    pub max_attempts: Option<i32>,
    /// How long the key stays taken after its job succeeded or went dead (needs `dedupe_key`).
    pub dedupe_for: Option<Duration>,
    /// What a duplicate does (needs `dedupe_key` for `Replace`).
    pub on_duplicate: OnDuplicate,
    /// The job's group: at most the queue's `group_concurrency` of its jobs run at once, with 1
    /// in enqueue order.
    pub group_key: Option<String>,
    /// The jobs it waits for: it is `blocked` until every one succeeded (not with `dedupe_key`
    /// or `group_key`).
    pub depends_on: Vec<i64>,
    /// What it does when a parent goes dead or is cancelled.
    pub on_parent_failure: ParentFailure,
    /// The producer's W3C traceparent, returned by the claim with the job; `None`: with the
    /// feature `otel`, the current context's span, if any.
    pub trace_context: Option<String>,
}

/// `queue_enqueue`'s `on_duplicate`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnDuplicate {
    /// Return the duplicate's id; change nothing.
    #[default]
    Ignore,
    /// A pending duplicate takes the new payload and `run_at` (debounce).
    Replace,
}

impl OnDuplicate {
    pub fn label(self) -> &'static str {
        match self {
            OnDuplicate::Ignore => "ignore",
            OnDuplicate::Replace => "replace",
        }
    }
}

impl std::str::FromStr for OnDuplicate {
    type Err = String;

    fn from_str(text: &str) -> Result<OnDuplicate, String> {
        match text {
            "ignore" => Ok(OnDuplicate::Ignore),
            "replace" => Ok(OnDuplicate::Replace),
            other => Err(format!("{other:?}: expected ignore or replace")),
        }
    }
}

/// A queue's settings for `queue_create`; `None` takes the extension's default.
#[derive(Clone, Debug, Default)]
pub struct QueueSettings {
    pub lease: Option<Duration>,
    pub max_attempts: Option<i32>,
    pub backoff_base: Option<Duration>,
    pub backoff_cap: Option<Duration>,
    /// How long finished jobs are kept (`None`: until `queue_purge`).
    pub retain: Option<Duration>,
    /// How many times a job may snooze (`None`: unlimited).
    pub max_snoozes: Option<i32>,
    /// How many jobs of one group may be pending or running at once (default 1).
    pub group_concurrency: Option<i32>,
}

/// One queue's row of `queue_stats()`.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueStats {
    pub queue: String,
    /// Due now.
    pub pending: i64,
    /// Waiting for a future `run_at`.
    pub scheduled: i64,
    pub running: i64,
    /// Running with an expired lease, awaiting reclaim.
    pub expired_leases: i64,
    pub succeeded: i64,
    pub dead: i64,
    pub cancelled: i64,
    /// How long the longest-waiting due job has been due.
    pub oldest_pending_age: Option<Duration>,
    /// Jobs waiting for room in their group.
    pub waiting: i64,
}

/// A queue's row of `leaseq stats`: its jobs in each status (`queue_counts()`) and what only
/// `queue_stats()` counts.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueCounts {
    pub queue: String,
    /// `(status, jobs)` for every status of `leaseq.job_status`, in the enum's order, zeros
    /// included. The labels stay text: a status added to the enum after this client was built
    /// is counted, not a decoding error.
    pub jobs: Vec<(String, i64)>,
    /// Pending jobs whose `run_at` is still ahead (counted among the pending too).
    pub scheduled: i64,
    /// Running with an expired lease, awaiting reclaim.
    pub expired_leases: i64,
    /// How long the longest-waiting due job has been due.
    pub oldest_pending_age: Option<Duration>,
}

const ENQUEUE: &str = "SELECT leaseq.queue_enqueue($1, $2::text::jsonb, $3::text::timestamptz,
                                                    $4, $5, $6,
                                                    $7::bigint OPERATOR(pg_catalog.*)
                                                        interval '1 microsecond',
                                                    $8, $9)";
// With parents or a trace context: named, so that the plain enqueue still calls 0.2.0's
// definition.
const ENQUEUE_AFTER: &str =
    "SELECT leaseq.queue_enqueue($1, $2::text::jsonb, $3::text::timestamptz,
                                                          $4, $5, $6,
                                                          $7::bigint OPERATOR(pg_catalog.*)
                                                              interval '1 microsecond',
                                                          $8, $9, depends_on => $10,
                                                          on_parent_failure => $11,
                                                          trace_context => $12)";
const ENQUEUE_BATCH_AFTER: &str = "SELECT id FROM leaseq.queue_enqueue_batch(
                                        $1, $2::text[]::jsonb[], $3::text::timestamptz, $4,
                                        depends_on => $5, on_parent_failure => $6,
                                        trace_context => $7) AS id";
const ENQUEUE_BATCH_EACH_AFTER: &str = "SELECT id FROM leaseq.queue_enqueue_batch(
                                        $1, $2::text[]::jsonb[], $3::text::timestamptz, $4,
                                        on_parent_failure => $5, depends_on_each => $6,
                                        trace_context => $7) AS id";
const ENQUEUE_BATCH: &str = "SELECT id FROM leaseq.queue_enqueue_batch($1, $2::text[]::jsonb[],
                                                                  $3::text::timestamptz, $4,
                                                                  $5) AS id";
const ENQUEUE_BATCH_TRACED: &str = "SELECT id FROM leaseq.queue_enqueue_batch(
                                        $1, $2::text[]::jsonb[], $3::text::timestamptz, $4, $5,
                                        trace_context => $6) AS id";
/// Whether the database keeps trace contexts (0.3.0 on).
const KEEPS_TRACES: &str = "SELECT EXISTS (SELECT FROM pg_catalog.pg_attribute
                                            WHERE attrelid = pg_catalog.to_regclass('leaseq.jobs')
                                              AND attname = 'trace_context'
                                              AND NOT attisdropped)";
const CLAIM: &str = "SELECT job_id, lease_token, attempt_no, payload::text, priority,
                            pg_catalog.date_part('epoch',
                                                 lease_expires_at - pg_catalog.clock_timestamp()),
                            pg_catalog.concat(job_id, '-', (extract(epoch FROM enqueued_at)
                                                            OPERATOR(pg_catalog.*) 1000000)::bigint),
                            trace_context
                       FROM leaseq.queue_claim($1, $2, $3, $4::bigint OPERATOR(pg_catalog.*)
                                                           interval '1 microsecond')";
/// `CLAIM` for a database not yet updated to 0.3.0: its claim returns no trace context.
const CLAIM_UNTRACED: &str = "SELECT job_id, lease_token, attempt_no, payload::text, priority,
                                     pg_catalog.date_part('epoch',
                                                          lease_expires_at
                                                          - pg_catalog.clock_timestamp()),
                                     pg_catalog.concat(job_id, '-',
                                                       (extract(epoch FROM enqueued_at)
                                                        OPERATOR(pg_catalog.*) 1000000)::bigint),
                                     NULL::text
                                FROM leaseq.queue_claim($1, $2, $3,
                                                        $4::bigint OPERATOR(pg_catalog.*)
                                                            interval '1 microsecond')";
const RENEW: &str = "SELECT pg_catalog.date_part('epoch',
                        leaseq.queue_renew($1, $2, $3::bigint OPERATOR(pg_catalog.*)
                                                   interval '1 microsecond')
                        - pg_catalog.clock_timestamp())";
const RENEW_BATCH: &str = "SELECT pg_catalog.date_part('epoch',
                                                    expires - pg_catalog.clock_timestamp())
                             FROM leaseq.queue_renew_batch(
                                  $1, $2, $3::bigint OPERATOR(pg_catalog.*)
                                          interval '1 microsecond')
                                  WITH ORDINALITY AS answer (expires, position)
                            ORDER BY position";
const COMPLETE: &str = "SELECT leaseq.queue_complete($1, $2, $3::text::jsonb)";
const STEP: &str = "SELECT leaseq.queue_step($1, $2, $3, $4::text::jsonb)";
const PROGRESS: &str = "SELECT leaseq.queue_progress($1, $2, $3::text::jsonb)";
const FAIL: &str = "SELECT leaseq.queue_fail($1, $2, $3::text::jsonb, $4,
                                             $5::bigint OPERATOR(pg_catalog.*)
                                                 interval '1 microsecond')::text";
const SNOOZE: &str = "SELECT leaseq.queue_snooze($1, $2, $3::bigint OPERATOR(pg_catalog.*)
                                        interval '1 microsecond')::text";
const COMPLETE_BATCH: &str = "SELECT done FROM leaseq.queue_complete_batch(
                                  $1, $2, $3::text[]::jsonb[])
                                  WITH ORDINALITY AS answer (done, position)
                                ORDER BY position";
const FAIL_BATCH: &str = "SELECT status::text FROM leaseq.queue_fail_batch(
                              $1, $2, $3::text[]::jsonb[], $4)
                              WITH ORDINALITY AS answer (status, position)
                            ORDER BY position";
const HAND_BACK: &str = "SELECT handed FROM leaseq.queue_hand_back($1, $2)
                             WITH ORDINALITY AS answer (handed, position)
                           ORDER BY position";
const STATS: &str = "SELECT queue, pending, scheduled, running, expired_leases, succeeded, dead,
                            cancelled, extract(epoch FROM oldest_pending_age)::float8, waiting
                       FROM leaseq.queue_stats()";
/// Every status of `leaseq.job_status`, in the enum's order.
const STATUSES: &str =
    "SELECT pg_catalog.unnest(pg_catalog.enum_range(NULL::leaseq.job_status))::text";
/// `queue_counts()`'s rows in its order (by queue, then status), each with what only
/// `queue_stats()` counts. A queue created or dropped between the two functions' reads is in one
/// of them only: the join leaves it out of this reading.
const COUNTS: &str = "SELECT counts.queue, counts.status::text, counts.jobs, stats.scheduled,
                             stats.expired_leases,
                             extract(epoch FROM stats.oldest_pending_age)::float8
                        FROM leaseq.queue_counts() WITH ORDINALITY
                             AS counts (queue, status, jobs, position)
                        JOIN leaseq.queue_stats() AS stats
                          ON stats.queue OPERATOR(pg_catalog.=) counts.queue
                       ORDER BY counts.position";

fn micros(d: Option<Duration>) -> Option<i64> {
    d.map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

fn seconds(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

impl Client {
    /// Connects; the connection is driven by a background task.
    pub async fn connect(url: &str) -> Result<Client, Error> {
        Ok(Client::connect_listening(url, |_| {}).await?.0)
    }

    /// Connects and calls `on_notification` with the channel of each NOTIFY this session
    /// receives (after `listen`). The returned handle finishes when the connection ends.
    pub async fn connect_listening(
        url: &str,
        mut on_notification: impl FnMut(&str) + Send + 'static,
    ) -> Result<(Client, tokio::task::JoinHandle<()>), Error> {
        // TLS as the URL's sslmode and sslrootcert ask (crate::tls).
        let (mut config, tls) = crate::tls::configure(url)?;
        if config.get_application_name().is_none() {
            config.application_name("leaseq");
        }
        if config.get_connect_timeout().is_none() {
            // A server that is down refuses at once; one that is unreachable must not hang us.
            config.connect_timeout(Duration::from_secs(5));
        }
        // `connect_timeout` bounds each host's socket connect only: a server that accepts and
        // then never answers the startup (stalled, overloaded) is bounded here, per host tried.
        // The error is the one tokio-postgres's own blocking client makes for the same case.
        let limit = *config.get_connect_timeout().expect("set above")
            * config.get_hosts().len().max(1) as u32;
        let (pg, mut connection) = tokio::time::timeout(limit, config.connect(tls))
            .await
            .map_err(|_| Error::__private_api_timeout())??;
        let driver = tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(message) = messages.next().await {
                match message {
                    Ok(AsyncMessage::Notification(n)) => on_notification(n.channel()),
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        });
        let client = Client {
            pg,
            prepared: Mutex::new(HashMap::new()),
            keeps_traces: Mutex::new(None),
            claims_untraced: Default::default(),
        };
        Ok((client, driver))
    }

    /// The underlying connection, for your own transactions.
    pub fn pg(&mut self) -> &mut tokio_postgres::Client {
        &mut self.pg
    }

    /// `sql`, prepared on this connection the first time it is used.
    async fn prepared(&self, sql: &'static str) -> Result<Statement, Error> {
        if let Some(statement) = self.prepared.lock().expect("statement cache").get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.pg.prepare(sql).await?;
        self.prepared
            .lock()
            .expect("statement cache")
            .insert(sql, statement.clone());
        Ok(statement)
    }

    /// The underlying connection, for your own statements.
    pub fn raw(&self) -> &tokio_postgres::Client {
        &self.pg
    }

    pub fn is_closed(&self) -> bool {
        self.pg.is_closed()
    }

    /// `LISTEN leaseq_<queue>`: enqueues on the queue then wake `connect_listening`'s callback.
    pub async fn listen(&self, queue: &str) -> Result<(), Error> {
        // LISTEN takes no parameters; queue names are `^[a-z][a-z0-9_]{0,47}$`, which the
        // extension enforces, but check here too before the name reaches SQL text.
        assert!(
            queue
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "queue names are lowercase identifiers"
        );
        self.pg
            .batch_execute(&format!("LISTEN leaseq_{queue}"))
            .await
    }

    pub async fn queue_create(&self, queue: &str, settings: &QueueSettings) -> Result<(), Error> {
        // Pass only the settings given, by name, so the extension's own defaults apply to the rest.
        let lease = micros(settings.lease);
        let base = micros(settings.backoff_base);
        let cap = micros(settings.backoff_cap);
        let retain = micros(settings.retain);
        let given: [(&str, Option<&(dyn ToSql + Sync)>, &str); 7] = [
            (
                "lease",
                lease.as_ref().map(|v| v as _),
                "::bigint OPERATOR(pg_catalog.*) interval '1 microsecond'",
            ),
            (
                "max_attempts",
                settings.max_attempts.as_ref().map(|v| v as _),
                "::int",
            ),
            (
                "backoff_base",
                base.as_ref().map(|v| v as _),
                "::bigint OPERATOR(pg_catalog.*) interval '1 microsecond'",
            ),
            (
                "backoff_cap",
                cap.as_ref().map(|v| v as _),
                "::bigint OPERATOR(pg_catalog.*) interval '1 microsecond'",
            ),
            (
                "retain",
                retain.as_ref().map(|v| v as _),
                "::bigint OPERATOR(pg_catalog.*) interval '1 microsecond'",
            ),
            (
                "max_snoozes",
                settings.max_snoozes.as_ref().map(|v| v as _),
                "::int",
            ),
            (
                "group_concurrency",
                settings.group_concurrency.as_ref().map(|v| v as _),
                "::int",
            ),
        ];
        let mut sql = String::from("SELECT leaseq.queue_create(queue => $1");
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&queue];
        for (name, value, cast) in given {
            if let Some(value) = value {
                params.push(value);
                sql.push_str(&format!(", {name} => ${}{cast}", params.len()));
            }
        }
        sql.push(')');
        self.pg.execute(&sql, &params).await?;
        Ok(())
    }

    pub async fn enqueue(
        &self,
        queue: &str,
        payload: &str,
        options: &EnqueueOptions,
    ) -> Result<i64, Error> {
        let (window, mode) = (micros(options.dedupe_for), options.on_duplicate.label());
        let params = enqueue_params(&queue, &payload, options, &window, &mode);
        let trace = self.trace_context(options.trace_context.as_deref()).await?;
        let row = if options.depends_on.is_empty() && trace.is_none() {
            let statement = self.prepared(ENQUEUE).await?;
            self.pg.query_one(&statement, &params).await?
        } else {
            let policy = options.on_parent_failure.label();
            let mut params = params.to_vec();
            params.extend([&options.depends_on as &(dyn ToSql + Sync), &policy, &trace]);
            let statement = self.prepared(ENQUEUE_AFTER).await?;
            self.pg.query_one(&statement, &params).await?
        };
        row.try_get(0)
    }

    /// As `enqueue_batch`, every job waiting for the same `parents` (a fan-out).
    pub async fn enqueue_batch_after(
        &self,
        queue: &str,
        payloads: &[String],
        parents: &[i64],
        on_parent_failure: ParentFailure,
        run_at: Option<&str>,
        priority: i32,
    ) -> Result<Vec<i64>, Error> {
        let policy = on_parent_failure.label();
        let trace = crate::trace::traceparent();
        let rows = self
            .pg
            .query(
                &self.prepared(ENQUEUE_BATCH_AFTER).await?,
                &[
                    &queue, &payloads, &run_at, &priority, &parents, &policy, &trace,
                ],
            )
            .await?;
        rows.iter().map(|r| r.try_get(0)).collect()
    }

    /// As `enqueue_batch`, each job waiting for its own parents: `jobs` pairs a payload with its
    /// parents (none: the job is due at once).
    pub async fn enqueue_batch_each_after(
        &self,
        queue: &str,
        jobs: &[(String, Vec<i64>)],
        on_parent_failure: ParentFailure,
        run_at: Option<&str>,
        priority: i32,
    ) -> Result<Vec<i64>, Error> {
        let payloads: Vec<&str> = jobs.iter().map(|(payload, _)| payload.as_str()).collect();
        let each = serde_json::json!(jobs.iter().map(|(_, parents)| parents).collect::<Vec<_>>());
        let rows = self
            .pg
            .query(
                &self.prepared(ENQUEUE_BATCH_EACH_AFTER).await?,
                &[
                    &queue,
                    &payloads,
                    &run_at,
                    &priority,
                    &on_parent_failure.label(),
                    &each,
                    &crate::trace::traceparent(),
                ],
            )
            .await?;
        rows.iter().map(|r| r.try_get(0)).collect()
    }

    /// Many jobs in one statement, all due at `run_at` (now when `None`); ids in payload order.
    pub async fn enqueue_batch(
        &self,
        queue: &str,
        payloads: &[String],
        run_at: Option<&str>,
        priority: i32,
    ) -> Result<Vec<i64>, Error> {
        self.enqueue_batch_grouped(queue, payloads, None, run_at, priority)
            .await
    }

    /// As `enqueue_batch`, with each job's group: one element per payload, `None` for a job
    /// without one (`group_keys` `None`: no job has one).
    pub async fn enqueue_batch_grouped(
        &self,
        queue: &str,
        payloads: &[String],
        group_keys: Option<&[Option<String>]>,
        run_at: Option<&str>,
        priority: i32,
    ) -> Result<Vec<i64>, Error> {
        let rows = match self.trace_context(None).await? {
            None => {
                let params: [&(dyn ToSql + Sync); 5] =
                    [&queue, &payloads, &run_at, &priority, &group_keys];
                self.pg
                    .query(&self.prepared(ENQUEUE_BATCH).await?, &params)
                    .await?
            }
            Some(trace) => {
                let params: [&(dyn ToSql + Sync); 6] =
                    [&queue, &payloads, &run_at, &priority, &group_keys, &trace];
                self.pg
                    .query(&self.prepared(ENQUEUE_BATCH_TRACED).await?, &params)
                    .await?
            }
        };
        rows.iter().map(|r| r.try_get(0)).collect()
    }

    /// The trace context an enqueue sends: `given`, else the current span's (feature `otel`)
    /// when the database keeps them (asked once).
    pub(crate) async fn trace_context(&self, given: Option<&str>) -> Result<Option<String>, Error> {
        if let Some(given) = given {
            return Ok(Some(given.to_string()));
        }
        let Some(current) = crate::trace::traceparent() else {
            return Ok(None);
        };
        let known = *self.keeps_traces.lock().expect("keeps_traces");
        let keeps = match known {
            Some(keeps) => keeps,
            None => {
                let keeps: bool = self.pg.query_one(KEEPS_TRACES, &[]).await?.try_get(0)?;
                *self.keeps_traces.lock().expect("keeps_traces") = Some(keeps);
                keeps
            }
        };
        Ok(keeps.then_some(current))
    }

    pub async fn claim(
        &self,
        queue: &str,
        worker: &str,
        batch: i32,
        lease: Option<Duration>,
    ) -> Result<Vec<Job>, Error> {
        use std::sync::atomic::Ordering::Relaxed;
        let statement = match self.claims_untraced.load(Relaxed) {
            false => match self.prepared(CLAIM).await {
                // A database not yet updated to 0.3.0: its claim returns no trace context.
                Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_COLUMN) => {
                    self.claims_untraced.store(true, Relaxed);
                    self.prepared(CLAIM_UNTRACED).await?
                }
                prepared => prepared?,
            },
            true => self.prepared(CLAIM_UNTRACED).await?,
        };
        let rows = self
            .pg
            .query(&statement, &[&queue, &worker, &batch, &micros(lease)])
            .await?;
        rows.iter()
            .map(|r: &Row| {
                Ok(Job {
                    id: r.try_get(0)?,
                    key: r.try_get(6)?,
                    queue: queue.to_string(),
                    lease_token: r.try_get(1)?,
                    attempt_no: r.try_get(2)?,
                    payload: r.try_get(3)?,
                    priority: r.try_get(4)?,
                    lease_left: seconds(r.try_get(5)?),
                    trace_context: r.try_get(7)?,
                })
            })
            .collect()
    }

    /// The lease time left after renewing, or `None` when the lease is lost (fenced).
    pub async fn renew(
        &self,
        job: &Job,
        lease: Option<Duration>,
    ) -> Result<Option<Duration>, Error> {
        self.renew_lease(job.id, job.lease_token, lease).await
    }

    /// `renew` by job id and lease token.
    pub(crate) async fn renew_lease(
        &self,
        id: i64,
        token: Uuid,
        lease: Option<Duration>,
    ) -> Result<Option<Duration>, Error> {
        let row = self
            .pg
            .query_one(&self.prepared(RENEW).await?, &[&id, &token, &micros(lease)])
            .await?;
        Ok(row.try_get::<_, Option<f64>>(0)?.map(seconds))
    }

    /// `renew` for many leases in one statement (`queue_renew_batch`), given as (job id, lease
    /// token) pairs: each one's time left, or `None` where it was lost.
    pub async fn renew_batch(
        &self,
        leases: &[(i64, Uuid)],
        lease: Option<Duration>,
    ) -> Result<Vec<Option<Duration>>, Error> {
        let ids: Vec<i64> = leases.iter().map(|(id, _)| *id).collect();
        let tokens = lease_tokens(leases.iter().map(|(_, token)| *token));
        let rows = self
            .pg
            .query(
                &self.prepared(RENEW_BATCH).await?,
                &[&ids, &tokens, &micros(lease)],
            )
            .await?;
        rows.iter()
            .map(|row| Ok(row.try_get::<_, Option<f64>>(0)?.map(seconds)))
            .collect()
    }

    /// True when the job is now `succeeded`; false when the lease was lost (nothing changed).
    /// `queue_step`: records, under the job's lease, that its handler did step `name` (with its
    /// output's JSON text), so that a later attempt finds it in `steps` and skips it. Call it in
    /// the transaction that made the step's effect (`step_tx`). False: the lease is lost, or the
    /// step was already recorded.
    pub async fn step(&self, job: &Job, name: &str, output: Option<&str>) -> Result<bool, Error> {
        step_tx(&self.pg, job, name, output).await
    }

    /// [`run_step`] on this connection: `f` runs only if no earlier attempt recorded the step.
    pub async fn run_step<F, Fut, E>(
        &self,
        job: &Job,
        name: &str,
        f: F,
    ) -> Result<Option<String>, StepError<E>>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Option<String>, E>>,
    {
        run_step(&self.pg, job, name, f).await
    }

    /// `queue_progress`: reports how far the job has got (JSON text: a fraction, counts, a
    /// message), shown by `job` and `leaseq show` and measured by the metrics'
    /// `leaseq_progress_age_seconds`. False: the lease is lost (nothing changed).
    pub async fn progress(&self, job: &Job, progress: &str) -> Result<bool, Error> {
        let row = self
            .pg
            .query_one(
                &self.prepared(PROGRESS).await?,
                &[&job.id, &job.lease_token, &progress],
            )
            .await?;
        row.try_get(0)
    }

    pub async fn complete(&self, job: &Job, result: Option<&str>) -> Result<bool, Error> {
        let row = self
            .pg
            .query_one(
                &self.prepared(COMPLETE).await?,
                &[&job.id, &job.lease_token, &result],
            )
            .await?;
        row.try_get(0)
    }

    /// `complete` for many jobs in one statement (`queue_complete_batch`): one answer per job,
    /// in order, each under its own lease.
    pub async fn complete_batch(&self, jobs: &[(&Job, Option<&str>)]) -> Result<Vec<bool>, Error> {
        let (ids, tokens, results) = batch_params(jobs);
        let rows = self
            .pg
            .query(
                &self.prepared(COMPLETE_BATCH).await?,
                &[&ids, &tokens, &results],
            )
            .await?;
        rows.iter().map(|row| row.try_get(0)).collect()
    }

    /// `fail` for many jobs in one statement (`queue_fail_batch`, the queue's backoff): each
    /// job's new status, or `None` where its lease was lost.
    pub async fn fail_batch(
        &self,
        jobs: &[(&Job, Option<&str>)],
        retry: bool,
    ) -> Result<Vec<Option<String>>, Error> {
        let (ids, tokens, errors) = batch_params(jobs);
        let rows = self
            .pg
            .query(
                &self.prepared(FAIL_BATCH).await?,
                &[&ids, &tokens, &errors, &retry],
            )
            .await?;
        rows.iter().map(|row| row.try_get(0)).collect()
    }

    /// The job's new status (`pending` or `dead`), or `None` when the lease was lost.
    pub async fn fail(
        &self,
        job: &Job,
        error: Option<&str>,
        retry: bool,
        retry_in: Option<Duration>,
    ) -> Result<Option<String>, Error> {
        let row = self
            .pg
            .query_one(
                &self.prepared(FAIL).await?,
                &[&job.id, &job.lease_token, &error, &retry, &micros(retry_in)],
            )
            .await?;
        row.try_get(0)
    }

    /// `queue_snooze`: the job back to `pending`, due after `delay`, its attempt budget kept. Its
    /// new status (`pending`, or `dead` past the queue's `max_snoozes`), or `None` when the lease
    /// was lost.
    pub async fn snooze(&self, job: &Job, delay: Duration) -> Result<Option<String>, Error> {
        let row = self
            .pg
            .query_one(
                &self.prepared(SNOOZE).await?,
                &[&job.id, &job.lease_token, &micros(Some(delay))],
            )
            .await?;
        row.try_get(0)
    }

    /// `queue_hand_back`: jobs claimed and never started, `pending` again at once with their
    /// attempt budget kept. One answer per job, in order: false where its lease was lost.
    pub async fn hand_back(&self, jobs: &[&Job]) -> Result<Vec<bool>, Error> {
        let ids: Vec<i64> = jobs.iter().map(|job| job.id).collect();
        let tokens = lease_tokens(jobs.iter().map(|job| job.lease_token));
        let rows = self
            .pg
            .query(&self.prepared(HAND_BACK).await?, &[&ids, &tokens])
            .await?;
        rows.iter().map(|row| row.try_get(0)).collect()
    }

    pub async fn redrive(&self, job_id: i64) -> Result<bool, Error> {
        self.pg
            .query_one("SELECT leaseq.queue_redrive($1)", &[&job_id])
            .await?
            .try_get(0)
    }

    pub async fn redrive_all(&self, queue: &str) -> Result<i64, Error> {
        self.pg
            .query_one("SELECT leaseq.queue_redrive_all($1)", &[&queue])
            .await?
            .try_get(0)
    }

    pub async fn cancel(&self, job_id: i64) -> Result<bool, Error> {
        self.pg
            .query_one("SELECT leaseq.queue_cancel($1)", &[&job_id])
            .await?
            .try_get(0)
    }

    /// `metrics()`: every queue's numbers in the Prometheus text exposition format.
    pub async fn metrics(&self) -> Result<String, Error> {
        self.pg
            .query_one("SELECT leaseq.metrics()", &[])
            .await?
            .try_get(0)
    }

    /// `queue_stats()`: a row per queue, in 0.2.0's columns (no `blocked`: `counts` has every
    /// status).
    pub async fn stats(&self) -> Result<Vec<QueueStats>, Error> {
        let rows = self.pg.query(STATS, &[]).await?;
        rows.iter()
            .map(|r| {
                Ok(QueueStats {
                    queue: r.try_get(0)?,
                    pending: r.try_get(1)?,
                    scheduled: r.try_get(2)?,
                    running: r.try_get(3)?,
                    expired_leases: r.try_get(4)?,
                    succeeded: r.try_get(5)?,
                    dead: r.try_get(6)?,
                    cancelled: r.try_get(7)?,
                    oldest_pending_age: r.try_get::<_, Option<f64>>(8)?.map(seconds),
                    waiting: r.try_get(9)?,
                })
            })
            .collect()
    }

    /// Every status of `leaseq.job_status`, in the enum's order: the database's list, so that a
    /// status added later is listed by a client built before it.
    pub async fn statuses(&self) -> Result<Vec<String>, Error> {
        let rows = self.pg.query(STATUSES, &[]).await?;
        rows.iter().map(|r| r.try_get(0)).collect()
    }

    /// `queue_counts()` with `queue_stats()`' scheduled jobs, expired leases and oldest pending
    /// age: a row per queue the caller may observe, by name.
    pub async fn counts(&self) -> Result<Vec<QueueCounts>, Error> {
        let rows = self.pg.query(COUNTS, &[]).await?;
        let mut queues: Vec<QueueCounts> = Vec::new();
        for r in &rows {
            let queue: String = r.try_get(0)?;
            let count = (r.try_get(1)?, r.try_get(2)?);
            // The rows come queue by queue: a queue's first row starts its entry.
            match queues.last_mut() {
                Some(last) if last.queue == queue => last.jobs.push(count),
                _ => queues.push(QueueCounts {
                    queue,
                    jobs: vec![count],
                    scheduled: r.try_get(3)?,
                    expired_leases: r.try_get(4)?,
                    oldest_pending_age: r.try_get::<_, Option<f64>>(5)?.map(seconds),
                }),
            }
        }
        Ok(queues)
    }
}

/// `queue_enqueue` inside your own transaction: the job commits or rolls back with your rows.
pub async fn enqueue_tx(
    tx: &tokio_postgres::Transaction<'_>,
    queue: &str,
    payload: &str,
    options: &EnqueueOptions,
) -> Result<i64, Error> {
    let (window, mode) = (micros(options.dedupe_for), options.on_duplicate.label());
    let params = enqueue_params(&queue, &payload, options, &window, &mode);
    // The current span's only where the database keeps trace contexts (asked in the transaction).
    let trace = match (&options.trace_context, crate::trace::traceparent()) {
        (Some(given), _) => Some(given.clone()),
        (None, Some(current)) if tx.query_one(KEEPS_TRACES, &[]).await?.try_get(0)? => {
            Some(current)
        }
        _ => None,
    };
    let row = if options.depends_on.is_empty() && trace.is_none() {
        tx.query_one(ENQUEUE, &params).await?
    } else {
        let policy = options.on_parent_failure.label();
        let mut params = params.to_vec();
        params.extend([&options.depends_on as &(dyn ToSql + Sync), &policy, &trace]);
        tx.query_one(ENQUEUE_AFTER, &params).await?
    };
    row.try_get(0)
}

/// `queue_complete` inside your own transaction, next to the job's effect: the effect commits if
/// and only if the completion does. On `false` (the lease was lost) roll the transaction back.
pub async fn complete_tx(
    tx: &tokio_postgres::Transaction<'_>,
    job: &Job,
    result: Option<&str>,
) -> Result<bool, Error> {
    tx.query_one(COMPLETE, &[&job.id, &job.lease_token, &result])
        .await?
        .try_get(0)
}

/// `queue_step` inside your own transaction, the one that made the step's effect: the step is
/// recorded if and only if that transaction commits, and only while the job's lease is held.
/// Takes the job's row with a share lock until then (the lease's renewal waits for it): keep the
/// transaction to the step's own work.
pub async fn step_tx(
    tx: &impl tokio_postgres::GenericClient,
    job: &Job,
    name: &str,
    output: Option<&str>,
) -> Result<bool, Error> {
    tx.query_one(STEP, &[&job.id, &job.lease_token, &name, &output])
        .await?
        .try_get(0)
}

/// Why `run_step` returned without an output.
#[derive(Debug)]
pub enum StepError<E> {
    /// The step's function failed: nothing was recorded.
    Step(E),
    /// The job's lease is lost: the step was not recorded (stop working on the job).
    LeaseLost,
    /// The database refused or failed a call.
    Db(Error),
}

impl<E> From<Error> for StepError<E> {
    fn from(e: Error) -> StepError<E> {
        StepError::Db(e)
    }
}

const RECORDED_STEP: &str = "SELECT output::text FROM leaseq.queue_steps($1) WHERE name = $2";

/// A step run once across the job's attempts: when an earlier attempt recorded step `name`
/// (`queue_steps`), its recorded output (JSON text) without calling `f`; otherwise `f`'s
/// output, recorded under the job's lease on `db` — inside your transaction when `db` is one,
/// so the step commits with `f`'s writes. `StepError::LeaseLost` when the lease is gone.
pub async fn run_step<F, Fut, E>(
    db: &impl tokio_postgres::GenericClient,
    job: &Job,
    name: &str,
    f: F,
) -> Result<Option<String>, StepError<E>>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Option<String>, E>>,
{
    if let Some(row) = db.query_opt(RECORDED_STEP, &[&job.id, &name]).await? {
        return Ok(row.try_get(0)?);
    }
    let output = f().await.map_err(StepError::Step)?;
    if step_tx(db, job, name, output.as_deref()).await? {
        Ok(output)
    } else {
        Err(StepError::LeaseLost)
    }
}

/// One document (or NULL) per job of a batch, or none at all when no job has one.
type Documents<'a> = Option<Vec<Option<&'a str>>>;

/// A batch finish's arrays: ids, lease tokens, and the jobs' documents.
fn batch_params<'a>(jobs: &[(&'a Job, Option<&'a str>)]) -> (Vec<i64>, Vec<Uuid>, Documents<'a>) {
    let docs = jobs.iter().any(|(_, doc)| doc.is_some());
    (
        jobs.iter().map(|(job, _)| job.id).collect(),
        lease_tokens(jobs.iter().map(|(job, _)| job.lease_token)),
        docs.then(|| jobs.iter().map(|(_, doc)| *doc).collect()),
    )
}

/// A batch's lease tokens: one for all when they are one claim's (the server fences each job
/// by its id with it, and the token is sent once), one per job otherwise.
fn lease_tokens(tokens: impl Iterator<Item = Uuid>) -> Vec<Uuid> {
    let mut tokens: Vec<Uuid> = tokens.collect();
    if tokens.iter().all(|token| *token == tokens[0]) {
        tokens.truncate(1);
    }
    tokens
}

/// `queue_enqueue`'s parameters, in `ENQUEUE`'s order.
fn enqueue_params<'a>(
    queue: &'a &'a str,
    payload: &'a &'a str,
    o: &'a EnqueueOptions,
    dedupe_for_micros: &'a Option<i64>,
    on_duplicate: &'a &'a str,
) -> [&'a (dyn ToSql + Sync); 9] {
    [
        queue,
        payload,
        &o.run_at,
        &o.priority,
        &o.dedupe_key,
        &o.max_attempts,
        dedupe_for_micros,
        on_duplicate,
        &o.group_key,
    ]
}
