//! The worker loop, written once: claim into free slots, heartbeat each job, finish it under its
//! lease, back off on database trouble, and shut down without ever finishing work it didn't do.
//!
//! - **Slots.** At most `concurrency` handlers run at once: a claim asks for no more than the
//!   free slots, so no job waits in memory for a handler while its lease runs. A handler that
//!   has decided frees its slot while its outcome is being sent, so the next claim overlaps the
//!   finishing: at most `2 × concurrency` jobs are held (claimed, not yet finished) at once.
//! - **Prefetch** (opt-in, `prefetch`): claims also fill up to `prefetch` places for jobs that
//!   wait, in claim order, for the next free slot — so a slot never waits for a round trip. Their
//!   leases run from the claim and are renewed by the heartbeat with the others; at shutdown the
//!   waiting jobs are handed back unstarted (`queue_hand_back`: due again at once, no attempt
//!   spent). The trade (docs/design.md): jobs wait here while another worker may be idle, an
//!   attempt's `started_at` is its claim, and a crash leaves them to their leases.
//! - **Wake-ups.** `LISTEN leaseq_<queue>` wakes an idle worker at once; a poll every `poll`
//!   catches what notifications miss (scheduled jobs, a lost connection).
//! - **Finishing together.** Handlers' decisions go to one finisher, which sends every decision
//!   waiting — and, while other jobs' handlers still run, those arriving within 2 ms — in one
//!   `queue_complete_batch` / `queue_fail_batch` call per kind (each job still under its own
//!   lease), on two connections of its own: one round is sent while the other's is out. A lone
//!   job is finished at once. Every finishing call is bounded by the leases it carries.
//! - **Claims.** A claim takes room for up to `batch` jobs; with `concurrency` over `batch`, two
//!   claims may be out at once. Claims stay big: when slots come free one by one, a claim waits
//!   for half a batch of them, or 2 ms; a wake-up or the poll claims at once. A claim waits for
//!   its answer a lease at most (the queue's, as the last claimed jobs told it): jobs in a later
//!   answer would be lost already, and a connection gone silent (a partition) must not hold the
//!   claim loop until TCP gives up on it.
//! - **Heartbeat.** One task renews every lease the worker holds, each at the latest when a third
//!   of its time is left, together with every other lease past a sixth of its time — so the
//!   jobs of a claim are renewed in one `queue_renew_batch` call. When a renew answers NULL
//!   (expired, reclaimed, cancelled) — or no renewal has answered by the lease's end, less a
//!   margin, even while one is still out — the handler's token fires and the job is never
//!   completed or failed by us. A lease's end is counted from when the claim or renewal that
//!   granted it was *sent*: the server counts from when it ran it, later, so ours comes first
//!   and a handler cut off from the database is stopped before the server may reclaim its job.
//! - **Shutdown.** When `shutdown` fires: stop claiming, let running jobs finish for up to
//!   `grace` (renewing meanwhile), then fire their tokens and leave them to their leases.
//! - **Database trouble.** Every call reconnects as needed, with capped backoff; a lost
//!   connection costs nothing but time, as long as renewals succeed within the lease.
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::error::Elapsed;
use tokio::time::{Instant, sleep, sleep_until, timeout};
use tokio_util::sync::CancellationToken;

use crate::client::{Client, Error, Job, Uuid, describe};
use crate::log::{job_event, worker_event};
use crate::trace::{Attempt, Tracer};

#[derive(Clone, Debug)]
pub struct WorkerConfig {
    pub queue: String,
    /// Recorded on each attempt and in every log line.
    pub worker_id: String,
    /// Most jobs running at once.
    pub concurrency: usize,
    /// Most jobs taken by one claim.
    pub batch: usize,
    /// Jobs claimed beyond the free slots, waiting for one (see the module comment); 0: none.
    pub prefetch: usize,
    /// Lease per claim; `None` takes the queue's.
    pub lease: Option<Duration>,
    /// Fallback poll interval when no notification arrives.
    pub poll: Duration,
    /// How long running jobs may finish after shutdown starts; then their handlers' `stop`
    /// tokens fire.
    pub grace: Duration,
    /// How long a handler may take to stop after its token fired at the end of the grace: one
    /// still running then is dropped (its future never polled again) and its job left to its
    /// lease, so that the run ends within `grace + stop_wait`.
    pub stop_wait: Duration,
    /// How long a handler may run: past it its token fires, it is dropped, and its job fails
    /// with `{"error": "timeout"}`, retried by the queue's policy. `None`: no limit.
    pub timeout: Option<Duration>,
}

impl WorkerConfig {
    pub fn new(queue: &str) -> WorkerConfig {
        WorkerConfig {
            queue: queue.to_string(),
            worker_id: default_worker_id(),
            concurrency: 1,
            batch: 10,
            prefetch: 0,
            lease: None,
            poll: Duration::from_secs(1),
            grace: Duration::from_secs(30),
            stop_wait: Duration::from_secs(1),
            timeout: None,
        }
    }
}

/// A token to give `Worker::run` as its `shutdown`: cancelled at the first SIGTERM or SIGINT;
/// at the second (either), the process exits at once with status 128 + its number, running
/// handlers and all — their jobs come back when their leases end. Needs a tokio runtime.
pub fn shutdown_on_signals() -> std::io::Result<CancellationToken> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let shutdown = CancellationToken::new();
    let first = shutdown.clone();
    tokio::spawn(async move {
        let mut next = async || {
            tokio::select! {
                _ = terminate.recv() => libc::SIGTERM,
                _ = interrupt.recv() => libc::SIGINT,
            }
        };
        let signal = next().await;
        tracing::event!(tracing::Level::INFO, signal, "shutdown_signal");
        first.cancel();
        let signal = next().await;
        tracing::event!(tracing::Level::WARN, signal, "second_signal: exiting now");
        std::process::exit(128 + signal);
    });
    Ok(shutdown)
}

/// `host/pid`: unique among live workers, readable in history.
pub fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!("{host}/{}", std::process::id())
}

/// What a handler decided about its job.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// `queue_complete` with this result (JSON text).
    Complete { result: Option<String> },
    /// `queue_fail`: `retry => false` goes straight to dead; `retry_in` overrides the backoff.
    Fail {
        error: Option<String>,
        retry: bool,
        retry_in: Option<Duration>,
    },
    /// `queue_snooze`: not ready yet — pending again after `delay`, its attempt budget kept (dead
    /// past the queue's `max_snoozes`).
    Snooze { delay: Duration },
    /// The handler recorded the outcome itself — typically `complete_tx` in the transaction that
    /// wrote its effect, so the effect commits exactly once with the completion — or gave the
    /// job up to its lease. The worker sends nothing.
    Finished,
}

impl Outcome {
    /// The JSON document it records: the result of a completion, the error of a failure.
    fn document(&self) -> Option<&str> {
        match self {
            Outcome::Complete { result } => result.as_deref(),
            Outcome::Fail { error, .. } => error.as_deref(),
            Outcome::Snooze { .. } | Outcome::Finished => None,
        }
    }

    /// What is recorded instead of this outcome when the server refused it (`e`) for its
    /// document: a failure whose error says why (`{"error": "outcome_refused", "outcome", "message",
    /// "sqlstate"}`, as the Python and Node Workers record it) — dead, unless this was a retried
    /// failure already (then retried by the queue's policy).
    fn refused(self, e: &Error) -> Outcome {
        let (kind, retry) = match self {
            Outcome::Complete { .. } => ("complete", false),
            Outcome::Snooze { .. } => ("snooze", false),
            Outcome::Fail { retry: false, .. } => ("dead", false),
            Outcome::Fail { retry_in: None, .. } => ("fail", true),
            Outcome::Fail { .. } => ("retry", true),
            Outcome::Finished => unreachable!("the worker never sends a Finished outcome"),
        };
        let message = e
            .as_db_error()
            .map_or_else(|| e.to_string(), |d| d.message().to_string());
        let sqlstate = e.code().map(|c| c.code());
        let error = serde_json::json!({
            "error": "outcome_refused", "outcome": kind, "message": message, "sqlstate": sqlstate,
        });
        Outcome::Fail {
            error: Some(error.to_string()),
            retry,
            retry_in: None,
        }
    }
}

/// How a worker run ended, counted per job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    pub claimed: u64,
    pub completed: u64,
    pub failed: u64,
    pub snoozed: u64,
    /// Finished by the handler itself (`Outcome::Finished`).
    pub finished_by_handler: u64,
    /// Lease lost while running (expired, reclaimed, cancelled): never finished by us.
    pub lease_lost: u64,
    /// Still running when the shutdown grace ran out: left to its lease.
    pub abandoned: u64,
    /// Prefetched, never started, and given back at shutdown (`queue_hand_back`).
    pub handed_back: u64,
    /// Handlers that ran past `WorkerConfig::timeout`: their jobs failed (counted in `failed`).
    pub timed_out: u64,
}

pub struct Worker {
    url: String,
    config: WorkerConfig,
}

struct Shared {
    /// Claims and heartbeats; LISTENs for wake-ups.
    db: Db,
    /// A second claiming connection, when one claim cannot fill every slot (`concurrency` over
    /// `batch`): one claim is answered while the other's jobs are handed out.
    second_claimer: Option<Db>,
    /// Finishing, on connections of their own so that it overlaps the claims, one round per
    /// connection at a time (with more than one slot; a single-slot worker finishes on `db`, in
    /// its job's own task): one round is sent while the other commits.
    finishing: Vec<Db>,
    config: WorkerConfig,
    summary: Mutex<Summary>,
    /// Jobs whose handler has not decided yet: what the finisher may still gather.
    deciding: AtomicUsize,
    /// Woken when `deciding` drops to zero.
    all_decided: Notify,
    /// The leases of the jobs running, for the heartbeat.
    leases: Leases,
    /// A slot per handler that may run.
    slots: Arc<Semaphore>,
    /// A place per prefetched job waiting for a slot.
    waiting: Arc<Semaphore>,
    /// Woken when there is room for half a claim (see `run_job`).
    room_for_a_claim: Notify,
}

impl Worker {
    pub fn new(url: &str, config: WorkerConfig) -> Worker {
        assert!(
            config.concurrency >= 1 && config.batch >= 1,
            "concurrency and batch are at least 1"
        );
        Worker {
            url: url.to_string(),
            config,
        }
    }

    /// Runs until `shutdown` fires and the drain ends. `handler(job, stop)` runs each job; `stop`
    /// fires when the job's lease is lost or the shutdown grace has run out: stop working then,
    /// whatever is returned is ignored. A claim the server refuses (unknown queue, invalid
    /// setting) ends the run with that error, after draining.
    pub async fn run<H, F>(self, handler: H, shutdown: CancellationToken) -> Result<Summary, Error>
    where
        H: Fn(Job, CancellationToken) -> F + Send + Sync + 'static,
        F: Future<Output = Outcome> + Send + 'static,
    {
        let wake = Arc::new(Notify::new());
        let shared = Arc::new(Shared::new(&self.url, self.config, wake.clone()));
        let (concurrency, prefetch) = (shared.config.concurrency, shared.config.prefetch);
        let _heartbeat = AbortOnDrop(tokio::spawn(heartbeat(shared.clone())));
        let handler = Arc::new(handler);
        let (decided, decisions) = mpsc::unbounded_channel();
        // A single-slot worker finishes each job in its own task: no finisher.
        let finisher = (!shared.finishing.is_empty())
            .then(|| tokio::spawn(finisher(shared.clone(), decisions)));
        let held = Arc::new(Semaphore::new(2 * concurrency + prefetch));
        // Prefetched jobs still waiting at shutdown go back through here.
        let (give_back, given_back) = mpsc::unbounded_channel();
        let hand_backs = tokio::spawn(hand_back(shared.clone(), given_back));
        let drain = Arc::new(Drain {
            shutdown: shutdown.clone(),
            hard_stop: CancellationToken::new(),
            abandon: CancellationToken::new(),
        });
        let mut jobs = JoinSet::new();
        let mut retry = Backoff::new();
        let mut fatal = None;
        // Where it connects: a later `db_error` says why it cannot (refused, timed out, …).
        worker_event!(
            INFO,
            shared,
            "started",
            concurrency = shared.config.concurrency,
            database = crate::client::connect_target(&shared.db.url).as_str()
        );

        // Claims in flight, one per claiming connection (0: `db`, 1: `second_claimer`), each
        // holding what it asked for, with when it was sent: its leases are counted from then.
        type Claimed = (
            Result<Result<Vec<Job>, Error>, Elapsed>,
            Instant,
            Room,
            usize,
        );
        let mut claiming: JoinSet<Claimed> = JoinSet::new();
        let mut idle: Vec<usize> = match shared.second_claimer {
            Some(_) => vec![1, 0],
            None => vec![0],
        };
        let start_jobs =
            |jobs: &mut JoinSet<()>, claimed: Vec<Job>, sent: Instant, mut room: Room| {
                let tracer = Tracer::current();
                for job in claimed {
                    let room = room.split();
                    let undecided = Undecided::new(&shared);
                    let (shared, handler, drain, decided, give_back, tracer) = (
                        shared.clone(),
                        handler.clone(),
                        drain.clone(),
                        decided.clone(),
                        give_back.clone(),
                        tracer.clone(),
                    );
                    jobs.spawn(run_job(
                        shared, job, sent, room, undecided, handler, drain, decided, give_back,
                        tracer,
                    ));
                }
                // what the claim did not fill goes back as `room` drops
            };
        // The least room worth a claim now: any after a wake-up, the poll, or `CLAIM_COOLDOWN`
        // after a job ended; half a claim after a full claim or when half a claim's room came
        // free; none after a claim came back short. Claims stay big while jobs end one by one.
        let half_a_claim = shared.half_a_claim();
        let mut at_least = Some(1);
        let mut cooldown: Option<Instant> = None;
        // The lease a claim asks for, or the queue's, as its last jobs came with it.
        let mut claim_wait = shared.config.lease.unwrap_or(FIRST_CLAIM_WAIT);
        while !shutdown.is_cancelled() {
            // A claim on each idle claiming connection, while there is room; what woke us is
            // used up once a claim is out.
            let mut sent = false;
            while let Some(least) = at_least
                && !idle.is_empty()
                && let Some(room) = Room::take(&shared, &held, least)
            {
                let claimer = idle.pop().expect("an idle claiming connection");
                let shared = shared.clone();
                claiming.spawn(async move {
                    let asked = room.jobs();
                    let sent = Instant::now();
                    let answer = timeout(claim_wait, shared.claim(claimer, asked)).await;
                    (answer, sent, room, claimer)
                });
                sent = true;
            }
            if sent {
                at_least = None;
            }
            tokio::select! {
                Some(answered) = claiming.join_next(), if !claiming.is_empty() => {
                    let (answer, sent, room, claimer) = answered.expect("a claim never panics");
                    idle.push(claimer);
                    let trouble = match answer {
                        Ok(Ok(claimed)) => {
                            retry.reset();
                            if shared.config.lease.is_none()
                                && let Some(job) = claimed.first()
                            {
                                claim_wait = job.lease_left;
                            }
                            at_least = (claimed.len() == room.jobs()).then_some(half_a_claim);
                            start_jobs(&mut jobs, claimed, sent, room);
                            None
                        }
                        Ok(Err(e)) if refused(&e) => {
                            worker_event!(
                                ERROR,
                                shared,
                                "refused",
                                during = "claim",
                                error = describe(&e).as_str()
                            );
                            fatal = Some(e);
                            break;
                        }
                        Ok(Err(e)) => Some(describe(&e)),
                        Err(_) => {
                            shared.claimer(claimer).reset();
                            Some("no answer within the lease: connection dropped".to_string())
                        }
                    };
                    if let Some(error) = trouble {
                        worker_event!(
                            WARN,
                            shared,
                            "db_error",
                            during = "claim",
                            error = error.as_str()
                        );
                        tokio::select! {
                            _ = sleep(retry.next()) => {}
                            _ = shutdown.cancelled() => {}
                        }
                        at_least = Some(1);
                    }
                }
                _ = wake.notified() => at_least = Some(1),
                _ = shared.room_for_a_claim.notified() => {
                    at_least = Some(at_least.map_or(half_a_claim, |l| l.min(half_a_claim)));
                }
                _ = sleep(shared.config.poll) => at_least = Some(1),
                _ = sleep_until(cooldown.unwrap_or_else(Instant::now)), if cooldown.is_some() => {
                    at_least = Some(1);
                }
                Some(_) = jobs.join_next(), if !jobs.is_empty() => {
                    cooldown.get_or_insert_with(|| Instant::now() + CLAIM_COOLDOWN);
                }
                _ = shutdown.cancelled() => {}
            }
            if at_least == Some(1) {
                cooldown = None;
            }
            // Jobs finished together (one finishing call) end in the same instant: let them all
            // free their slots before claiming, so that one claim fills the free slots instead
            // of a claim per finished job.
            tokio::task::yield_now().await;
            while jobs.try_join_next().is_some() {}
        }
        // Jobs claimed by the claims still in flight are ours: they run like the others.
        while let Some(answered) = claiming.join_next().await {
            if let (Ok(Ok(claimed)), sent, room, _) = answered.expect("a claim never panics") {
                start_jobs(&mut jobs, claimed, sent, room);
            }
        }

        worker_event!(
            INFO,
            shared,
            "draining",
            in_flight = jobs.len(),
            grace_s = shared.config.grace.as_secs_f64()
        );
        let grace_end = sleep(shared.config.grace);
        tokio::pin!(grace_end);
        loop {
            tokio::select! {
                next = jobs.join_next() => if next.is_none() { break },
                _ = &mut grace_end, if !drain.hard_stop.is_cancelled() => {
                    drain.hard_stop.cancel();
                    let (abandon, wait) = (drain.abandon.clone(), shared.config.stop_wait);
                    tokio::spawn(async move {
                        sleep(wait).await;
                        abandon.cancel();
                    });
                }
            }
        }
        // Every job has been finished, handed back or given up; what the finisher still holds is
        // sent. Jobs went on being finished one by one should it have panicked — a bug, raised
        // here.
        drop(give_back);
        drop(decided);
        hand_backs.await.expect("handing back never panics");
        if let Some(finisher) = finisher
            && let Err(e) = finisher.await
            && e.is_panic()
        {
            worker_event!(ERROR, shared, "finisher_panicked");
            std::panic::resume_unwind(e.into_panic());
        }
        let summary = shared.summary.lock().expect("summary lock").clone();
        worker_event!(
            INFO,
            shared,
            "stopped",
            claimed = summary.claimed,
            completed = summary.completed,
            failed = summary.failed,
            finished_by_handler = summary.finished_by_handler,
            lease_lost = summary.lease_lost,
            abandoned = summary.abandoned,
            handed_back = summary.handed_back
        );
        match fatal {
            Some(e) => Err(e),
            None => Ok(summary),
        }
    }
}

impl Shared {
    /// A worker's state before its first claim: no connection is made until one is needed.
    fn new(url: &str, config: WorkerConfig, wake: Arc<Notify>) -> Shared {
        let db = |listen| Db {
            url: url.to_string(),
            listen,
            current: Mutex::new(None),
        };
        Shared {
            db: db(Some((config.queue.clone(), wake))),
            second_claimer: (config.concurrency > config.batch).then(|| db(None)),
            finishing: if config.concurrency > 1 {
                (0..FINISHING_CONNECTIONS).map(|_| db(None)).collect()
            } else {
                Vec::new()
            },
            summary: Mutex::new(Summary::default()),
            deciding: AtomicUsize::new(0),
            all_decided: Notify::new(),
            leases: Leases::default(),
            slots: Arc::new(Semaphore::new(config.concurrency)),
            waiting: Arc::new(Semaphore::new(config.prefetch)),
            room_for_a_claim: Notify::new(),
            config,
        }
    }

    /// Claims up to `n` jobs on claiming connection `claimer` (0 or 1).
    async fn claim(&self, claimer: usize, n: usize) -> Result<Vec<Job>, Error> {
        let client = self.claimer(claimer).get().await?;
        client
            .claim(
                &self.config.queue,
                &self.config.worker_id,
                n as i32,
                self.config.lease,
            )
            .await
    }

    /// Claiming connection `claimer`: 0 is `db`, 1 `second_claimer`.
    fn claimer(&self, claimer: usize) -> &Db {
        match (claimer, &self.second_claimer) {
            (1, Some(second)) => second,
            _ => &self.db,
        }
    }

    /// Room worth waking the claim loop for.
    fn half_a_claim(&self) -> usize {
        let places = self.config.concurrency + self.config.prefetch;
        (self.config.batch.min(places) / 2).max(1)
    }

    /// Jobs a claim could start or keep waiting now (before the limit on jobs held).
    fn free_places(&self) -> usize {
        self.slots.available_permits() + self.waiting.available_permits()
    }

    /// Finishing connection `i`, or `db` for a single-slot worker.
    fn finishing(&self, i: usize) -> &Db {
        self.finishing.get(i).unwrap_or(&self.db)
    }

    /// Wakes the claim loop when there is room for half a claim.
    fn room_freed(&self) {
        if self.free_places() >= self.half_a_claim() {
            self.room_for_a_claim.notify_one();
        }
    }

    fn count(&self, f: impl FnOnce(&mut Summary)) {
        f(&mut self.summary.lock().expect("summary lock"));
    }
}

/// The stages of a shutdown, as each job sees them (shared: one count, not three tokens'
/// locked counts, per job).
struct Drain {
    /// Claims stop; a prefetched job not started yet is handed back.
    shutdown: CancellationToken,
    /// The grace ran out: running handlers are told to stop, and what they decide is not sent.
    hard_stop: CancellationToken,
    /// `stop_wait` later: handlers still running are dropped, their jobs left to their leases.
    abandon: CancellationToken,
}

/// One job, from claim to finish (its claim sent at `claim_sent`). Its slot is held until the
/// finisher has recorded it. Through the `drain`, a prefetched job not started yet is handed
/// back through `give_back`, and a running one given up.
#[allow(clippy::too_many_arguments)]
async fn run_job<H, F>(
    shared: Arc<Shared>,
    job: Job,
    claim_sent: Instant,
    room: Room,
    undecided: Undecided,
    handler: Arc<H>,
    drain: Arc<Drain>,
    decided: mpsc::UnboundedSender<Decision>,
    give_back: mpsc::UnboundedSender<(Job, Instant)>,
    tracer: Tracer,
) where
    H: Fn(Job, CancellationToken) -> F + Send + Sync + 'static,
    F: Future<Output = Outcome> + Send + 'static,
{
    shared.count(|s| s.claimed += 1);
    job_event!(
        DEBUG,
        shared,
        job,
        "claimed",
        lease_s = job.lease_left.as_secs_f64()
    );
    let stop = drain.hard_stop.child_token();
    let lease = shared.leases.hold(&job, claim_sent, stop.clone());

    let Room {
        slot,
        waiting,
        held: _held,
    } = room;
    let slot = match slot {
        Some(slot) => slot,
        // Prefetched: wait for a slot (in claim order: the semaphore is fair). At shutdown the
        // job goes back unstarted; with its lease lost, it is nobody's to start.
        None => {
            let acquired = tokio::select! {
                biased;
                _ = drain.shutdown.cancelled() => None,
                _ = stop.cancelled() => None,
                slot = shared.slots.clone().acquire_owned() => {
                    Some(slot.expect("the slots are never closed"))
                }
            };
            drop(waiting);
            shared.room_freed();
            match acquired {
                Some(slot) => slot,
                None => {
                    drop(undecided);
                    match lease.release() {
                        Some(lease_end) => {
                            let _ = give_back.send((job, lease_end));
                        }
                        None => shared.count(|s| s.lease_lost += 1),
                    }
                    return;
                }
            }
        }
    };
    let span = Attempt::start(&job, &tracer);
    let run = span.within(span.call(|| handler(job.clone(), stop.clone())));
    let timed = async {
        let Some(limit) = shared.config.timeout else {
            return run.await;
        };
        match tokio::time::timeout(limit, run).await {
            Ok(outcome) => outcome,
            Err(_) => {
                stop.cancel(); // told, then dropped: what it decides later is nobody's
                shared.count(|s| s.timed_out += 1);
                let message = format!(
                    "the handler ran past its timeout of {:.3} s",
                    limit.as_secs_f64()
                );
                job_event!(WARN, shared, job, "timed_out", reason = message.as_str());
                let error = serde_json::json!({"error": "timeout", "message": message});
                Outcome::Fail {
                    error: Some(error.to_string()),
                    retry: true,
                    retry_in: None,
                }
            }
        }
    };
    let outcome = tokio::select! {
        outcome = timed => outcome,
        _ = drain.abandon.cancelled() => {
            span.end("abandoned", None);
            shared.count(|s| s.abandoned += 1);
            job_event!(
                WARN,
                shared,
                job,
                "abandoned",
                reason = "its handler had not stopped within stop_wait after the grace: left to \
                          its lease"
            );
            return;
        }
    };
    // The handler is done: another job may start while this one is finished. The claim loop
    // is woken at once when there is room for half a claim (see `Worker::run`).
    drop(slot);
    shared.room_freed();
    // No renewal after this.
    let Some(lease_end) = lease.release() else {
        span.end("lost", None);
        shared.count(|s| s.lease_lost += 1);
        return; // never finish a job whose lease is gone: its new owner (or nobody) decides
    };
    if drain.hard_stop.is_cancelled() {
        span.end("abandoned", None);
        shared.count(|s| s.abandoned += 1);
        job_event!(
            WARN,
            shared,
            job,
            "abandoned",
            reason = "shutdown grace ran out: left to its lease"
        );
        return;
    }
    if outcome == Outcome::Finished {
        span.end("finished", None);
        shared.count(|s| s.finished_by_handler += 1);
        job_event!(DEBUG, shared, job, "finished", by = "handler");
        return;
    }
    if shared.finishing.is_empty() {
        // One slot: nothing to finish together with. (Boxed, here and below: these rare paths
        // would otherwise make every job's task as large as a query's state, copied at spawn.)
        return Box::pin(finish(
            &shared,
            shared.finishing(0),
            &job,
            outcome,
            lease_end,
            span,
        ))
        .await;
    }
    let (done, recorded) = oneshot::channel();
    let (id, attempt) = (job.id, job.attempt_no);
    let decision = Decision {
        job,
        outcome,
        lease_end,
        span,
        done,
    };
    match decided.send(decision) {
        Ok(()) => {
            drop(undecided); // after the send: the finisher's count never runs ahead of it
            if recorded.await.is_err() {
                shared.count(|s| s.abandoned += 1);
                worker_event!(
                    WARN,
                    shared,
                    "abandoned",
                    job_id = id,
                    attempt,
                    reason = "the finisher stopped before recording it: left to its lease"
                );
            }
        }
        // The finisher outlives every job; should it be gone, finish here.
        Err(mpsc::error::SendError(d)) => {
            Box::pin(finish(
                &shared,
                shared.finishing(0),
                &d.job,
                d.outcome,
                d.lease_end,
                d.span,
            ))
            .await
        }
    }
}

/// Room for jobs, taken by a claim before it is sent: per job, a slot for its handler (free
/// once the handler has decided) or, prefetched, a place to wait for one, and a place among the
/// jobs held (free once its outcome is recorded). At most `concurrency` handlers run, and at
/// most `2 × concurrency + prefetch` jobs are held — those running, waiting and being finished
/// — so a claim overlaps the finishing of the last.
struct Room {
    /// `None` in a prefetched job's share.
    slot: Option<OwnedSemaphorePermit>,
    waiting: Option<OwnedSemaphorePermit>,
    held: OwnedSemaphorePermit,
}

impl Room {
    /// Room for as many jobs as free slots, waiting places and jobs held allow, up to `batch`
    /// (slots first); `None` when that is under `least`.
    fn take(shared: &Shared, held: &Arc<Semaphore>, least: usize) -> Option<Room> {
        let n = shared
            .free_places()
            .min(held.available_permits())
            .min(shared.config.batch);
        if n == 0 || n < least {
            return None;
        }
        let slots = n.min(shared.slots.available_permits());
        let take = |s: &Arc<Semaphore>, n: usize| {
            (n > 0).then(|| {
                s.clone()
                    .try_acquire_many_owned(n as u32)
                    .expect("only the claim loop takes room")
            })
        };
        Some(Room {
            slot: take(&shared.slots, slots),
            waiting: take(&shared.waiting, n - slots),
            held: take(held, n).expect("room for at least one job"),
        })
    }

    fn jobs(&self) -> usize {
        self.held.num_permits()
    }

    /// One job's share: a slot while the room has any, else a place to wait.
    fn split(&mut self) -> Room {
        let one = |p: &mut Option<OwnedSemaphorePermit>| match p {
            Some(permit) if permit.num_permits() > 1 => permit.split(1),
            _ => p.take(),
        };
        let slot = one(&mut self.slot);
        Room {
            waiting: if slot.is_none() {
                one(&mut self.waiting)
            } else {
                None
            },
            slot,
            held: self.held.split(1).expect("room for each claimed job"),
        }
    }
}

/// A job whose handler has not decided yet, counted from its spawn until dropped (whatever
/// path its task takes); the last one wakes a finisher gathering a round.
struct Undecided(Arc<Shared>);

impl Undecided {
    fn new(shared: &Arc<Shared>) -> Undecided {
        shared.deciding.fetch_add(1, Ordering::SeqCst);
        Undecided(shared.clone())
    }
}

impl Drop for Undecided {
    fn drop(&mut self) {
        if self.0.deciding.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.all_decided.notify_waiters();
        }
    }
}

/// A task aborted when this is dropped: the heartbeat never outlives its worker's run (not even
/// when it ends with an error).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A handler's decision about its job, on its way to the finisher.
struct Decision {
    job: Job,
    outcome: Outcome,
    lease_end: Instant,
    /// The attempt's span (feature `otel`), ended with what became of it.
    span: Attempt,
    /// Told once the outcome is recorded (or given up): the job's slot is free then.
    done: oneshot::Sender<()>,
}

/// The most decisions one finishing call carries.
const MAX_FINISH_BATCH: usize = 1000;
/// How long a round may wait for the decisions of other running jobs.
const GATHER_WINDOW: Duration = Duration::from_millis(2);

/// How long a slot that came free may wait for others before a claim takes it alone.
const CLAIM_COOLDOWN: Duration = Duration::from_millis(2);

/// How long a claim may wait for its answer before any claim has told the queue's lease.
pub const FIRST_CLAIM_WAIT: Duration = Duration::from_secs(30);

/// Finishing connections (see `Shared::finishing`).
const FINISHING_CONNECTIONS: usize = 2;

/// Finishes jobs as their handlers decide, in rounds: a round takes the decisions waiting and,
/// while other jobs are still running, those that arrive within `GATHER_WINDOW` — so a lone job
/// is finished at once, and a claim's worth of quick jobs in one call. A round is gathered once
/// a finishing connection is free, and sent on it while the other's round is still out.
async fn finisher(shared: Arc<Shared>, mut decisions: mpsc::UnboundedReceiver<Decision>) {
    let mut idle: Vec<usize> = (0..shared.finishing.len()).collect();
    let mut sending = JoinSet::new();
    loop {
        if idle.is_empty() {
            let sent = sending
                .join_next()
                .await
                .expect("a round out per busy connection");
            idle.push(sent.expect("a round never panics"));
        }
        let Some(first) = decisions.recv().await else {
            break;
        };
        let window_end = Instant::now() + GATHER_WINDOW;
        let mut round = vec![first];
        while round.len() < MAX_FINISH_BATCH {
            if let Ok(next) = decisions.try_recv() {
                round.push(next);
                continue;
            }
            // Registered before the count is read, so the last decision cannot slip between.
            let all_decided = shared.all_decided.notified();
            tokio::pin!(all_decided);
            all_decided.as_mut().enable();
            if shared.deciding.load(Ordering::SeqCst) == 0 {
                break;
            }
            tokio::select! {
                next = decisions.recv() => match next {
                    Some(next) => round.push(next),
                    None => break,
                },
                _ = &mut all_decided => {} // take what they sent, then stop
                _ = sleep_until(window_end) => break,
            }
        }
        let connection = idle.pop().expect("a free connection");
        let shared = shared.clone();
        sending.spawn(async move {
            finish_round(&shared, connection, round).await;
            connection
        });
    }
    while sending.join_next().await.is_some() {}
}

/// One round of decisions: completions in one `queue_complete_batch`, failures with the
/// queue's backoff in one `queue_fail_batch` per `retry` flag; failures with their own delay,
/// lone decisions, and any group whose call fails go one by one through `finish`, which retries
/// database trouble within the lease and handles refusals.
async fn finish_round(shared: &Shared, connection: usize, round: Vec<Decision>) {
    let db = shared.finishing(connection);
    let (mut completions, mut retried, mut buried, mut singles) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for d in round {
        match &d.outcome {
            Outcome::Complete { .. } => completions.push(d),
            Outcome::Fail {
                retry: true,
                retry_in: None,
                ..
            } => retried.push(d),
            Outcome::Fail {
                retry: false,
                retry_in: None,
                ..
            } => buried.push(d),
            _ => singles.push(d),
        }
    }
    for group in [completions, retried, buried] {
        if group.len() < 2 {
            singles.extend(group);
            continue;
        }
        // Database trouble is retried as a batch, within the earliest lease it carries; a
        // refusal, a wrong answer or a lease running out sends the group one by one.
        let earliest_end = group.iter().map(|d| d.lease_end).min();
        let earliest_end = earliest_end.expect("a group of two or more");
        let mut retry = Backoff::new();
        let mut uncertain = false;
        let answered = loop {
            let answered = tokio::time::timeout_at(earliest_end, finish_group(db, &group));
            let error = match answered.await {
                Ok(Ok(answers)) if answers.len() == group.len() => break Ok(answers),
                Ok(Ok(answers)) => format!("{} answers for {} jobs", answers.len(), group.len()),
                Ok(Err(e)) if refused(&e) => describe(&e),
                Ok(Err(e)) => {
                    uncertain = true;
                    let pause = Instant::now() + retry.next();
                    if pause < earliest_end {
                        worker_event!(
                            WARN,
                            shared,
                            "db_error",
                            during = "finish_batch",
                            error = describe(&e).as_str()
                        );
                        sleep_until(pause).await;
                        continue;
                    }
                    describe(&e)
                }
                Err(_) => {
                    db.reset();
                    "no answer before a lease ended".to_string()
                }
            };
            break Err(error);
        };
        match answered {
            Ok(answers) => {
                for (d, status) in group.into_iter().zip(answers) {
                    record(shared, &d.job, &d.outcome, status, uncertain, d.span);
                    let _ = d.done.send(());
                }
            }
            Err(error) => {
                worker_event!(
                    WARN,
                    shared,
                    "db_error",
                    during = "finish_batch",
                    jobs = group.len(),
                    error = error.as_str()
                );
                singles.extend(group);
            }
        }
    }
    for d in singles {
        finish(shared, db, &d.job, d.outcome, d.lease_end, d.span).await;
        let _ = d.done.send(());
    }
}

/// One batch call for a group of decisions of one kind: each job's new status, or `None` where
/// its lease had ended.
async fn finish_group(db: &Db, group: &[Decision]) -> Result<Vec<Option<String>>, Error> {
    let client = db.get().await?;
    let jobs: Vec<(&Job, Option<&str>)> = group
        .iter()
        .map(|d| (&d.job, d.outcome.document()))
        .collect();
    match &group[0].outcome {
        Outcome::Complete { .. } => Ok(client
            .complete_batch(&jobs)
            .await?
            .into_iter()
            .map(|ok| ok.then(|| "succeeded".to_string()))
            .collect()),
        Outcome::Fail { retry, .. } => client.fail_batch(&jobs, *retry).await,
        Outcome::Snooze { .. } => unreachable!("snoozes are sent one by one"),
        Outcome::Finished => unreachable!("run_job never hands over a Finished job"),
    }
}

/// Hands back the prefetched jobs still waiting at shutdown, in batches: they arrive together,
/// so a batch takes those that follow within `GATHER_WINDOW`. Database trouble is retried
/// within the earliest lease a batch carries; what cannot be handed back is left to its lease.
async fn hand_back(shared: Arc<Shared>, mut given_back: mpsc::UnboundedReceiver<(Job, Instant)>) {
    while let Some(first) = given_back.recv().await {
        let window_end = Instant::now() + GATHER_WINDOW;
        let mut batch = vec![first];
        while batch.len() < MAX_FINISH_BATCH {
            tokio::select! {
                next = given_back.recv() => match next {
                    Some(next) => batch.push(next),
                    None => break,
                },
                _ = sleep_until(window_end) => break,
            }
        }
        let earliest_end = batch.iter().map(|(_, end)| *end).min();
        let earliest_end = earliest_end.expect("a batch of one or more");
        let jobs: Vec<&Job> = batch.iter().map(|(job, _)| job).collect();
        let db = shared.finishing(0);
        let mut retry = Backoff::new();
        let answered = loop {
            let attempt = async { db.get().await?.hand_back(&jobs).await };
            let error = match tokio::time::timeout_at(earliest_end, attempt).await {
                Ok(Ok(answers)) if answers.len() == jobs.len() => break Ok(answers),
                Ok(Ok(answers)) => format!("{} answers for {} jobs", answers.len(), jobs.len()),
                Ok(Err(e)) if !refused(&e) && Instant::now() + retry.peek() < earliest_end => {
                    worker_event!(
                        WARN,
                        shared,
                        "db_error",
                        during = "hand_back",
                        error = describe(&e).as_str()
                    );
                    sleep(retry.next()).await;
                    continue;
                }
                Ok(Err(e)) => describe(&e),
                Err(_) => {
                    db.reset();
                    "no answer before a lease ended".to_string()
                }
            };
            break Err(error);
        };
        match answered {
            Ok(answers) => {
                for (job, handed) in jobs.iter().zip(answers) {
                    if handed {
                        shared.count(|s| s.handed_back += 1);
                        job_event!(DEBUG, shared, job, "handed_back");
                    } else {
                        shared.count(|s| s.lease_lost += 1);
                        job_event!(
                            WARN,
                            shared,
                            job,
                            "lease_lost",
                            reason = "hand back refused: the lease had ended"
                        );
                    }
                }
            }
            Err(error) => {
                shared.count(|s| s.abandoned += jobs.len() as u64);
                worker_event!(
                    WARN,
                    shared,
                    "abandoned",
                    reason = "could not hand back prefetched jobs: left to their leases",
                    jobs = jobs.len(),
                    error = error.as_str()
                );
            }
        }
    }
}

/// Counts and logs what finishing a job did: its new status, or `None` when its lease had ended
/// (the outcome fenced) — or, when an earlier attempt's answer was lost (`uncertain`), possibly
/// when that attempt had already finished it.
fn record(
    shared: &Shared,
    job: &Job,
    outcome: &Outcome,
    status: Option<String>,
    uncertain: bool,
    span: Attempt,
) {
    match status {
        Some(_) if matches!(outcome, Outcome::Complete { .. }) => {
            span.end("complete", None);
            shared.count(|s| s.completed += 1);
            job_event!(DEBUG, shared, job, "completed");
        }
        Some(status) if matches!(outcome, Outcome::Snooze { .. }) => {
            span.end("snooze", None);
            shared.count(|s| s.snoozed += 1);
            job_event!(DEBUG, shared, job, "snoozed", status = status.as_str());
        }
        Some(status) => {
            shared.count(|s| s.failed += 1);
            let error = outcome.document().unwrap_or_default();
            if status == "dead" {
                span.end("dead", Some(error));
                job_event!(ERROR, shared, job, "failed", status = "dead", error);
            } else {
                let delayed = matches!(
                    outcome,
                    Outcome::Fail {
                        retry_in: Some(_),
                        ..
                    }
                );
                span.end(if delayed { "retry" } else { "fail" }, Some(error));
                job_event!(WARN, shared, job, "failed", status = status.as_str(), error);
            }
        }
        None => {
            span.end("fenced", None);
            shared.count(|s| s.lease_lost += 1);
            let reason = if uncertain {
                "finish refused: the lease had ended, or an earlier attempt whose answer was lost \
                 had finished the job"
            } else {
                "finish refused: the lease had ended"
            };
            job_event!(WARN, shared, job, "fenced", reason);
        }
    }
}

/// The leases of the running jobs, by job id: what the heartbeat renews.
#[derive(Default)]
struct Leases {
    held: Mutex<HashMap<i64, Lease>>,
    /// When the heartbeat next wakes (`None`: when a lease is taken).
    wake_at: Mutex<Option<Instant>>,
    /// Wakes the heartbeat when a lease falls due before it would wake.
    earlier: Notify,
}

struct Lease {
    token: Uuid,
    attempt_no: i32,
    /// The job's key, for the heartbeat's events.
    key: String,
    /// When the lease ends, as last granted — never after its end on the server: the server
    /// counts the time it gave from when it ran the claim or renewal, we from when we sent it,
    /// earlier by the request's way there (all of it when the request waited in the network).
    ends: Instant,
    /// Renewed with others from here on (a sixth of its time gone) …
    early: Instant,
    /// … and alone at the latest here (a third of its time left).
    due: Instant,
    /// Unless a renewal has answered by here, the lease is given up and its handler stopped —
    /// even while a renewal is still out: a little before `ends`, so that the handler hears it
    /// before the server may reclaim the job.
    stop_at: Instant,
    /// The handler's token: fired when the lease is lost.
    stop: CancellationToken,
}

impl Lease {
    /// The server gave `left` to the claim or renewal sent at `sent`.
    fn granted(&mut self, sent: Instant, left: Duration) {
        self.ends = sent + left;
        (self.early, self.due) = (sent + left / 6, sent + left * 2 / 3);
        self.stop_at = self.ends - stop_margin(left);
    }
}

/// How long before a lease's end (as we count it) its handler is stopped when no renewal has
/// answered: a tenth of the lease, at most a second — room for a late timer on a busy machine
/// and for the handler to stop, well after the renewal due at a third left.
fn stop_margin(left: Duration) -> Duration {
    left.div_f64(STOP_MARGIN_FRACTION).min(STOP_MARGIN_CAP)
}

/// The stop margin is `1 / STOP_MARGIN_FRACTION` of the lease left, at most `STOP_MARGIN_CAP`.
pub const STOP_MARGIN_FRACTION: f64 = 10.0;
pub const STOP_MARGIN_CAP: Duration = Duration::from_secs(1);

impl Leases {
    /// Holds `job`'s lease, granted by the claim sent at `sent`, until the returned guard is
    /// released or dropped.
    fn hold<'a>(&'a self, job: &Job, sent: Instant, stop: CancellationToken) -> Held<'a> {
        let mut lease = Lease {
            token: job.lease_token,
            attempt_no: job.attempt_no,
            key: job.key.clone(),
            ends: sent,
            early: sent,
            due: sent,
            stop_at: sent,
            stop,
        };
        lease.granted(sent, job.lease_left);
        let due = lease.due;
        self.held.lock().expect("leases lock").insert(job.id, lease);
        if self
            .wake_at
            .lock()
            .expect("wake lock")
            .is_none_or(|at| due < at)
        {
            self.earlier.notify_one();
        }
        Held {
            leases: self,
            id: job.id,
        }
    }
}

/// A lease held by a running job; released when the handler has decided.
struct Held<'a> {
    leases: &'a Leases,
    id: i64,
}

impl Held<'_> {
    /// Stops renewing; when the lease ends, as last granted — `None` when the heartbeat found it
    /// lost (and fired the handler's token).
    fn release(self) -> Option<Instant> {
        let lease = self
            .leases
            .held
            .lock()
            .expect("leases lock")
            .remove(&self.id);
        lease.map(|l| l.ends)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.leases
            .held
            .lock()
            .expect("leases lock")
            .remove(&self.id);
    }
}

/// Renews the worker's leases together (see the module comment); a lease found lost leaves the
/// registry and fires its handler's token — when a renewal answers NULL, or when its `stop_at`
/// comes with no renewal answered, whether the database refused us or has not answered yet.
/// Runs as long as the worker.
async fn heartbeat(shared: Arc<Shared>) {
    let leases = &shared.leases;
    let mut trouble = Backoff::new();
    loop {
        // `due` is never after `stop_at` (see `Lease::granted` and the retries below): waking
        // for the renewals is waking in time to give a lease up.
        let next = {
            let held = leases.held.lock().expect("leases lock");
            let live = held.values().filter(|l| !l.stop.is_cancelled());
            live.map(|l| l.due).min()
        };
        *leases.wake_at.lock().expect("wake lock") = next;
        match next {
            Some(at) => tokio::select! {
                _ = sleep_until(at) => {}
                _ = leases.earlier.notified() => continue,
            },
            None => {
                leases.earlier.notified().await;
                continue;
            }
        }
        let now = Instant::now();
        give_up_unrenewed(&shared, now);
        let group: Vec<(i64, Uuid, Instant)> = {
            let held = leases.held.lock().expect("leases lock");
            held.iter()
                .filter(|(_, l)| l.early <= now && !l.stop.is_cancelled())
                .map(|(id, l)| (*id, l.token, l.stop_at))
                .collect()
        };
        if group.is_empty() {
            continue;
        }
        let pairs: Vec<(i64, Uuid)> = group.iter().map(|(id, t, _)| (*id, *t)).collect();
        // No answer is waited for past the first lease to be given up: that lease's handler
        // must hear it then, not when a connection that stopped answering times out.
        let bound = group.iter().map(|g| g.2).min().expect("a group");
        let sent = Instant::now();
        let answers = match tokio::time::timeout_at(bound, renew(&shared, &pairs)).await {
            Ok(answers) => answers,
            Err(_) => {
                shared.db.reset();
                Err("no answer before a lease was due to be given up".to_string())
            }
        };
        let mut held = leases.held.lock().expect("leases lock");
        match answers {
            Ok(answers) => {
                trouble.reset();
                for ((id, _, _), answer) in group.iter().zip(answers) {
                    // Released meanwhile: its job has decided, nothing to tell it.
                    let Some(lease) = held.get_mut(id) else {
                        continue;
                    };
                    let (attempt, key) = (lease.attempt_no, lease.key.as_str());
                    match answer {
                        Some(left) => {
                            let lease_s = left.as_secs_f64();
                            job_event!(DEBUG, shared, (*id, attempt, key), "renewed", lease_s);
                            lease.granted(sent, left);
                        }
                        None => {
                            job_event!(
                                WARN,
                                shared,
                                (*id, attempt, key),
                                "lease_lost",
                                reason = "renew refused: expired, reclaimed or cancelled"
                            );
                            held.remove(id).expect("held").stop.cancel();
                        }
                    }
                }
            }
            Err(error) => {
                let retry_at = Instant::now() + trouble.next();
                worker_event!(
                    WARN,
                    shared,
                    "db_error",
                    during = "renew",
                    jobs = group.len(),
                    error = error.as_str()
                );
                for (id, _, _) in &group {
                    let Some(lease) = held.get_mut(id) else {
                        continue;
                    };
                    if Instant::now() < lease.stop_at {
                        (lease.early, lease.due) = (retry_at, retry_at.min(lease.stop_at));
                        continue;
                    }
                    let lease = held.remove(id).expect("held");
                    job_event!(
                        WARN,
                        shared,
                        (*id, lease.attempt_no, lease.key.as_str()),
                        "lease_lost",
                        reason = "database unreachable until the lease ran out",
                        error = error.as_str()
                    );
                    lease.stop.cancel();
                }
            }
        }
    }
}

/// Gives up the leases whose `stop_at` has come (no renewal answered in time) and fires their
/// handlers' tokens — under the registry's lock, so a handler that decides meanwhile finds its
/// lease either still held (and finishes it) or gone (and never does).
fn give_up_unrenewed(shared: &Shared, now: Instant) {
    let mut held = shared.leases.held.lock().expect("leases lock");
    let ended: Vec<i64> = held
        .iter()
        .filter(|(_, l)| l.stop_at <= now && !l.stop.is_cancelled())
        .map(|(id, _)| *id)
        .collect();
    for id in ended {
        let lease = held.remove(&id).expect("held");
        job_event!(
            WARN,
            shared,
            (id, lease.attempt_no, lease.key.as_str()),
            "lease_lost",
            reason = "no renewal answered before the lease's end"
        );
        lease.stop.cancel();
    }
}

/// One renewal round: `queue_renew_batch`, or `queue_renew` for a lone lease — and one by one
/// when the server refuses the batch call (an extension older than 0.2.0 has none).
async fn renew(shared: &Shared, leases: &[(i64, Uuid)]) -> Result<Vec<Option<Duration>>, String> {
    let client = shared.db.get().await.map_err(|e| describe(&e))?;
    let lease = shared.config.lease;
    if leases.len() > 1 {
        match client.renew_batch(leases, lease).await {
            Ok(answers) if answers.len() == leases.len() => return Ok(answers),
            Ok(answers) => {
                return Err(format!(
                    "{} answers for {} leases",
                    answers.len(),
                    leases.len()
                ));
            }
            Err(e) if refused(&e) => {}
            Err(e) => return Err(describe(&e)),
        }
    }
    let mut answers = Vec::with_capacity(leases.len());
    for (id, token) in leases {
        answers.push(
            client
                .renew_lease(*id, *token, lease)
                .await
                .map_err(|e| describe(&e))?,
        );
    }
    Ok(answers)
}

/// Completes or fails the job under its lease, retrying database trouble until the lease ends.
/// An outcome the server refuses for its document (`POISON_CLASSES`: a result over
/// `leaseq.max_payload_bytes`, text that is not JSON, a delay out of range) would be refused
/// again: the job fails with the reason instead (`Outcome::refused`). Any other refusal leaves
/// the job to its lease.
async fn finish(
    shared: &Shared,
    db: &Db,
    job: &Job,
    outcome: Outcome,
    lease_end: Instant,
    span: Attempt,
) {
    let mut outcome = outcome;
    let mut poisoned = false;
    let mut retry = Backoff::new();
    let mut uncertain = false;
    loop {
        let attempt = async {
            let client = db.get().await?;
            match &outcome {
                Outcome::Complete { result } => client
                    .complete(job, result.as_deref())
                    .await
                    .map(|ok| ok.then(|| "succeeded".to_string())),
                Outcome::Fail {
                    error,
                    retry,
                    retry_in,
                } => client.fail(job, error.as_deref(), *retry, *retry_in).await,
                Outcome::Snooze { delay } => client.snooze(job, *delay).await,
                Outcome::Finished => unreachable!("run_job never finishes a Finished job"),
            }
        };
        // No attempt outlives the lease by much: past it the server refuses anyway, and a
        // connection that stopped answering must not hold the job's slot for ever.
        let bound = lease_end.max(Instant::now() + MIN_FINISH_WAIT);
        let Ok(answered) = tokio::time::timeout_at(bound, attempt).await else {
            db.reset();
            span.end("abandoned", None);
            shared.count(|s| s.abandoned += 1);
            job_event!(
                WARN,
                shared,
                job,
                "abandoned",
                reason = "no answer from the database before the lease ran out"
            );
            return;
        };
        match answered {
            Ok(status) => {
                record(shared, job, &outcome, status, uncertain, span);
                return;
            }
            Err(e) if poison(&e) && !poisoned => {
                job_event!(
                    WARN,
                    shared,
                    job,
                    "outcome_refused",
                    error = describe(&e).as_str()
                );
                outcome = outcome.refused(&e);
                poisoned = true;
            }
            Err(e) if refused(&e) => {
                span.end("abandoned", None);
                shared.count(|s| s.abandoned += 1);
                job_event!(
                    ERROR,
                    shared,
                    job,
                    "refused",
                    during = "finish",
                    reason = "left to its lease",
                    error = describe(&e).as_str()
                );
                return;
            }
            Err(e) => {
                if Instant::now() >= lease_end {
                    span.end("abandoned", None);
                    shared.count(|s| s.abandoned += 1);
                    job_event!(
                        WARN,
                        shared,
                        job,
                        "abandoned",
                        reason = "database unreachable until the lease ran out",
                        error = describe(&e).as_str()
                    );
                    return;
                }
                job_event!(
                    WARN,
                    shared,
                    job,
                    "db_error",
                    during = "finish",
                    error = describe(&e).as_str()
                );
                uncertain = true;
                sleep_until(lease_end.min(Instant::now() + retry.next())).await;
            }
        }
    }
}

/// The least time one finishing attempt gets, even when the lease is about to end.
pub const MIN_FINISH_WAIT: Duration = Duration::from_secs(5);

/// SQLSTATE classes of a call the server refuses and would refuse again (bad input, a constraint,
/// names and privileges, unsupported, program limits, no schema): a claim's stops the worker.
/// Connection trouble, shutdowns and restarts (08, 57, 53 …) are worth retrying instead.
pub const REFUSED_CLASSES: [&str; 6] = ["0A", "22", "23", "3F", "42", "54"];
/// SQLSTATE classes of an outcome the server refuses for its document (a data exception, too
/// large): it would be refused again, so its job fails with the reason instead.
pub const POISON_CLASSES: [&str; 2] = ["22", "54"];

/// True when the server refused the call itself (`REFUSED_CLASSES`).
pub fn refused(e: &Error) -> bool {
    e.code()
        .is_some_and(|c| REFUSED_CLASSES.contains(&&c.code()[..2]))
}

/// True when the server refused an outcome for its document (`POISON_CLASSES`).
fn poison(e: &Error) -> bool {
    e.code()
        .is_some_and(|c| POISON_CLASSES.contains(&&c.code()[..2]))
}

/// One of the worker's connections: made on first use and again once it is closed. The claiming
/// one LISTENs on the queue's channel (`listen`) so that an enqueue's commit wakes the claim loop.
struct Db {
    url: String,
    listen: Option<(String, Arc<Notify>)>,
    current: Mutex<Option<Arc<Client>>>,
}

impl Db {
    /// Drops the connection (one that stopped answering): the next `get` makes a new one.
    fn reset(&self) {
        *self.current.lock().expect("connection lock") = None;
    }

    fn live(&self) -> Option<Arc<Client>> {
        let current = self.current.lock().expect("connection lock");
        current.as_ref().filter(|c| !c.is_closed()).cloned()
    }

    /// The live connection, or a new one. Connecting holds no lock: a connect that hangs (a
    /// partition) delays no `reset` and no other caller's own bound.
    async fn get(&self) -> Result<Arc<Client>, Error> {
        if let Some(client) = self.live() {
            return Ok(client);
        }
        let client = match &self.listen {
            Some((queue, wake)) => {
                let notify = wake.clone();
                let (client, driver) =
                    Client::connect_listening(&self.url, move |_| notify.notify_one()).await?;
                client.listen(queue).await?;
                // Jobs may have been enqueued while we were away: look at once.
                wake.notify_one();
                // The notifications end with the connection (a failover, a terminated session):
                // wake the loop, whose claim connects and listens again — an idle worker would
                // otherwise sleep until its poll.
                let lost = wake.clone();
                tokio::spawn(async move {
                    let _ = driver.await;
                    lost.notify_one();
                });
                client
            }
            None => Client::connect(&self.url).await?,
        };
        let mut current = self.current.lock().expect("connection lock");
        // Another caller connected meanwhile: use theirs, ours closes as it drops.
        if let Some(theirs) = current.as_ref().filter(|c| !c.is_closed()) {
            return Ok(theirs.clone());
        }
        let client = Arc::new(client);
        *current = Some(client.clone());
        Ok(client)
    }
}

/// Capped exponential backoff for database trouble: 100 ms doubling to 5 s.
struct Backoff {
    next: Duration,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff {
            next: Duration::from_millis(100),
        }
    }

    /// The pause `next` would return, without moving on.
    fn peek(&self) -> Duration {
        self.next
    }

    fn next(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(Duration::from_secs(5));
        now
    }

    fn reset(&mut self) {
        *self = Backoff::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Holds one lease of `lease`, granted by a claim whose answer took `answered_after`, with
    /// the heartbeat renewing it against `url`; how long after the claim was sent the handler's
    /// token fired. The clock is tokio's paused one: it moves only when every task waits, to
    /// the next timer, so the instants are exact.
    async fn stopped_after(url: &str, lease: Duration, answered_after: Duration) -> Duration {
        let config = WorkerConfig::new("q");
        let shared = Arc::new(Shared::new(url, config, Arc::new(Notify::new())));
        stopped_after_on(shared, lease, answered_after).await
    }

    async fn stopped_after_on(
        shared: Arc<Shared>,
        lease: Duration,
        answered_after: Duration,
    ) -> Duration {
        let job = Job {
            id: 1,
            key: "1-0".into(),
            queue: "q".into(),
            lease_token: Uuid::nil(),
            attempt_no: 1,
            payload: "{}".into(),
            priority: 0,
            lease_left: lease,
            trace_context: None,
        };
        let sent = Instant::now();
        tokio::time::advance(answered_after).await;
        let stop = CancellationToken::new();
        let _held = shared.leases.hold(&job, sent, stop.clone());
        let _heartbeat = AbortOnDrop(tokio::spawn(heartbeat(shared.clone())));
        stop.cancelled().await;
        sent.elapsed()
    }

    /// The server's lease ends `lease` after it ran the claim, at the earliest when the claim was
    /// sent; the handler must hear it has lost the job before then, by the margin.
    fn assert_stopped_in_time(fired: Duration, lease: Duration) {
        let stop_at = lease - stop_margin(lease);
        assert!(
            fired >= stop_at && fired < stop_at + Duration::from_millis(10) && fired < lease,
            "stopped {fired:?} after the claim was sent, for a lease of {lease:?}: due at {stop_at:?}"
        );
    }

    /// A server that takes connections (the kernel completes the handshake) and never answers;
    /// every connection made stays in its accept queue, to be counted.
    fn silent_server() -> (std::net::TcpListener, String) {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!(
            "postgres://leaseq@127.0.0.1:{}/leaseq?connect_timeout=60",
            silent.local_addr().unwrap().port()
        );
        (silent, url)
    }

    fn connections_made(silent: &std::net::TcpListener) -> usize {
        silent.set_nonblocking(true).unwrap();
        std::iter::from_fn(|| silent.accept().ok()).count()
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_left_unanswered_stops_the_handler_before_the_lease_ends() {
        // The renewal due at a third left hangs from then on.
        let (_silent, url) = silent_server();
        let lease = Duration::from_secs(3);
        let fired = stopped_after(&url, lease, Duration::from_millis(500)).await;
        assert_stopped_in_time(fired, lease);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connect_left_unanswered_does_not_hold_the_heartbeat_past_the_lease() {
        // The claiming connection is being made (and hangs) when the renewal needs it.
        let (_silent, url) = silent_server();
        let lease = Duration::from_secs(3);
        let config = WorkerConfig::new("q");
        let shared = Arc::new(Shared::new(&url, config, Arc::new(Notify::new())));
        let claiming = shared.clone();
        let _claim = AbortOnDrop(tokio::spawn(async move {
            let _ = claiming.claim(0, 1).await;
        }));
        let fired = stopped_after_on(shared, lease, Duration::from_millis(500)).await;
        assert_stopped_in_time(fired, lease);
    }

    #[tokio::test(start_paused = true)]
    async fn a_claim_left_unanswered_is_dropped_after_a_lease_and_sent_again() {
        let (silent, url) = silent_server();
        let mut config = WorkerConfig::new("q");
        config.lease = Some(Duration::from_secs(3));
        config.poll = Duration::from_secs(600);
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            sleep(Duration::from_secs(10)).await;
            stop.cancel();
        });
        let worker = Worker::new(&url, config).run(|_, _| async { Outcome::Finished }, shutdown);
        let summary = worker.await.expect("no claim was refused");
        assert_eq!(summary.claimed, 0);
        // Connected at 0 s, and again after each 3 s wait plus its backoff (0.1, 0.2 s): a claim
        // left to the connect timeout (60 s) would have made one connection.
        assert_eq!(connections_made(&silent), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusing_database_stops_the_handler_before_the_lease_ends() {
        let port = {
            let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            closed.local_addr().unwrap().port()
        };
        let url = format!("postgres://leaseq@127.0.0.1:{port}/leaseq");
        let lease = Duration::from_secs(3);
        let fired = stopped_after(&url, lease, Duration::from_millis(500)).await;
        assert_stopped_in_time(fired, lease);
    }
}
