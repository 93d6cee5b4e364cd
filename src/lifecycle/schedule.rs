//! Periodic jobs: `queue_schedule(name, queue, every, payload, timezone, catch_up)` enqueues
//! `payload` into `queue` at every tick of the five-field cron expression `every`, read in
//! `timezone` (DST included).
//!
//! Exactly one job per tick, with no extra process: a schedule's row holds `next_at`, its next
//! tick not yet enqueued. Whoever claims the queue — and the maintenance worker, where it runs —
//! materialises due ticks in its own transaction: it locks the due schedule rows (`SKIP LOCKED`:
//! another claimer is doing it, and nobody waits), inserts the tick's job and moves `next_at`
//! past now, all in one transaction — committed together, or, after a crash or a rollback, not
//! at all and done again by the next claim. After downtime only the latest missed tick is
//! enqueued, unless the schedule says `catch_up` (then every missed one, `CATCH_UP_LIMIT` per
//! call). The claim path pays a lookup in a per-backend map of each queue's earliest `next_at`
//! (read again after any change to the schedules, whose trigger sends the invalidation).
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use chrono::{DateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH, WHOLE_QUEUE};
use crate::core::datum::{Jsonb, QueuePrivilege};
use crate::core::errors;
use crate::core::release::{self, Release};
use crate::core::schema;
use crate::core::spi::{self, BOOL, INT8, JSONB, Statement, TEXT, TIMESTAMPTZ};
use crate::lifecycle::queue;

/// The most missed ticks one materialisation enqueues for a `catch_up` schedule.
const CATCH_UP_LIMIT: usize = 1000;

pub(crate) const UPSERT: Statement = Statement {
    name: "queue_schedule",
    sql: "INSERT INTO leaseq.schedules AS schedule
                 (name, queue, every, payload, timezone, catch_up, next_at, trace_context)
          VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
          ON CONFLICT (name) DO UPDATE
             SET queue = EXCLUDED.queue, every = EXCLUDED.every, payload = EXCLUDED.payload,
                 timezone = EXCLUDED.timezone, catch_up = EXCLUDED.catch_up,
                 next_at = EXCLUDED.next_at, trace_context = EXCLUDED.trace_context,
                 updated_at = clock_timestamp()",
    params: &[TEXT, TEXT, TEXT, JSONB, TEXT, BOOL, TIMESTAMPTZ, TEXT],
};

pub(crate) const QUEUE_OF: Statement = Statement {
    name: "queue_unschedule.queue_of",
    sql: "SELECT schedule.queue FROM leaseq.schedules AS schedule WHERE schedule.name = $1",
    params: &[TEXT],
};

pub(crate) const DELETE: Statement = Statement {
    name: "queue_unschedule",
    sql: "DELETE FROM leaseq.schedules AS schedule WHERE schedule.name = $1 RETURNING true",
    params: &[TEXT],
};

pub(crate) const LIST: Statement = Statement {
    name: "queue_schedules",
    sql: "SELECT schedule.name, schedule.queue, schedule.every, schedule.timezone,
                 schedule.catch_up, schedule.payload, schedule.next_at, schedule.last_job_id
            FROM leaseq.schedules AS schedule
           ORDER BY schedule.name",
    params: &[],
};

/// Each queue's earliest tick not yet enqueued (for the claim path's map).
pub(crate) const EARLIEST: Statement = Statement {
    name: "schedule.earliest",
    sql: "SELECT schedule.queue, min(schedule.next_at)
            FROM leaseq.schedules AS schedule
           GROUP BY schedule.queue",
    params: &[],
};

/// The due schedules of queue `$1` (NULL: of every queue), locked; those another transaction
/// holds are someone else's to materialise.
pub(crate) const DUE: Statement = Statement {
    name: "schedule.due",
    sql: "SELECT schedule.name, schedule.queue, schedule.every, schedule.timezone,
                 schedule.catch_up, schedule.payload, schedule.next_at
            FROM leaseq.schedules AS schedule
           WHERE ($1::text IS NULL OR schedule.queue = $1) AND schedule.next_at <= $2
           ORDER BY schedule.next_at
             FOR UPDATE SKIP LOCKED",
    params: &[TEXT, TIMESTAMPTZ],
};

/// One tick's job: the schedule's (`$5`) payload, due at the tick (a missed one: at once), with
/// the schedule's trace context.
pub(crate) const ENQUEUE_TICK: Statement = Statement {
    name: "schedule.enqueue_tick",
    sql: "INSERT INTO leaseq.jobs
                 (queue, payload, run_at, max_attempts, created_at, updated_at, trace_context)
          SELECT queue.name, $2, $3, queue.max_attempts, $4, $4, schedule.trace_context
            FROM leaseq.queues AS queue, leaseq.schedules AS schedule
           WHERE queue.name = $1 AND schedule.name = $5
          RETURNING id, pg_catalog.pg_notify('leaseq_' || $1, '')",
    params: &[TEXT, JSONB, TIMESTAMPTZ, TIMESTAMPTZ, TEXT],
};

/// `ENQUEUE_TICK` under a schema before 0.3.0, which keeps no trace context (`$5` unused).
pub(crate) const ENQUEUE_TICK_BEFORE_0_3_0: Statement = Statement {
    name: "schedule.enqueue_tick_before_0_3_0",
    sql: "INSERT INTO leaseq.jobs
                 (queue, payload, run_at, max_attempts, created_at, updated_at)
          SELECT queue.name, $2, $3, queue.max_attempts, $4, $4
            FROM leaseq.queues AS queue
           WHERE queue.name = $1
          RETURNING id, pg_catalog.pg_notify('leaseq_' || $1, '')",
    params: &[TEXT, JSONB, TIMESTAMPTZ, TIMESTAMPTZ, TEXT],
};

/// The schedule's next tick, and the job its last tick enqueued (NULL: none now).
pub(crate) const ADVANCE: Statement = Statement {
    name: "schedule.advance",
    sql: "UPDATE leaseq.schedules AS schedule
             SET next_at = $2, last_job_id = coalesce($3, schedule.last_job_id)
           WHERE schedule.name = $1",
    params: &[TEXT, TIMESTAMPTZ, INT8],
};

/// `ADVANCE` under a schema before 0.3.0, which does not keep the last job.
pub(crate) const ADVANCE_BEFORE_0_3_0: Statement = Statement {
    name: "schedule.advance_before_0_3_0",
    sql: "UPDATE leaseq.schedules AS schedule SET next_at = $2 WHERE schedule.name = $1",
    params: &[TEXT, TIMESTAMPTZ],
};

/// Enqueues `payload` into `queue` at every tick of `every`, a five-field cron expression
/// (minute, hour, day of month, month, day of week) read in `timezone` (an IANA name; DST
/// included); replaces the schedule `name` if it exists. Returns the first tick. After downtime
/// only the latest missed tick is enqueued, unless `catch_up` (then every missed one). Each
/// tick's job carries `trace_context` (a W3C traceparent, see `queue_enqueue`).
///
/// Errors: `22004` NULL argument, `22023` invalid name, expression, timezone or trace context,
/// `42704` unknown queue, `54000` payload over `leaseq.max_payload_bytes`, `42501` no admin right
/// on the queue — nor, when `name` is a schedule of another queue, on that one.
#[pg_extern(name = "queue_schedule")]
pub fn schedule_ticks(
    name: Option<&str>,
    queue: Option<&str>,
    every: Option<&str>,
    payload: Option<Jsonb>,
    timezone: default!(Option<&str>, "'UTC'"),
    catch_up: default!(Option<bool>, false),
    trace_context: default!(Option<&str>, "NULL"),
) -> TimestampWithTimeZone {
    let schedule = Schedule {
        name,
        queue,
        every,
        payload,
        timezone,
        catch_up,
        trace_context,
    };
    schedule_with(&UPSERT, schedule)
}

/// `queue_schedule`'s arguments.
pub(crate) struct Schedule<'a> {
    pub name: Option<&'a str>,
    pub queue: Option<&'a str>,
    pub every: Option<&'a str>,
    pub payload: Option<Jsonb>,
    pub timezone: Option<&'a str>,
    pub catch_up: Option<bool>,
    pub trace_context: Option<&'a str>,
}

/// `queue_schedule`'s work, with the schema's statement that writes the schedule: this
/// release's `UPSERT`, or (compat) an older schema's, which keeps no trace context (its `$8`
/// unused).
pub(crate) fn schedule_with(
    upsert: &'static Statement,
    schedule: Schedule<'_>,
) -> TimestampWithTimeZone {
    const F: &str = "queue_schedule";
    let Schedule {
        name,
        queue,
        every,
        payload,
        timezone,
        catch_up,
        trace_context,
    } = schedule;
    let name = args::required(F, "name", name);
    args::short_text(F, "name", name);
    let queue = args::queue_name(F, queue);
    let every = args::required(F, "every", every);
    let payload = args::required(F, "payload", payload);
    args::document(F, "payload", &payload);
    let timezone = args::required(F, "timezone", timezone);
    let catch_up = args::required(F, "catch_up", catch_up);
    if let Some(trace) = trace_context {
        args::trace_context(F, "trace_context", trace);
    }
    let cron = parse_every(every).unwrap_or_else(|why| errors::invalid_argument(F, "every", &why));
    let tz: Tz = timezone.parse().unwrap_or_else(|_| {
        errors::invalid_argument(
            F,
            "timezone",
            "must be an IANA time zone name, such as UTC or Europe/Paris",
        )
    });
    let now = clock::now();
    let first = next_tick(&cron, tz, to_chrono(now))
        .unwrap_or_else(|| errors::invalid_argument(F, "every", "never matches a time"));
    let first = from_chrono(first);
    access::require_queue(F, queue, QueuePrivilege::Admin);
    // Replacing a schedule of another queue takes it away from that queue: its admin's call.
    if let Some(current) = queue_of(name).filter(|current| current != queue) {
        access::require_queue(F, &current, QueuePrivilege::Admin);
    }
    connect::connect(&JOB_PATH, |client| {
        queue::load(client, F, queue);
        spi::run(
            client,
            upsert,
            &[
                name.into(),
                queue.into(),
                every.into(),
                Jsonb::arg(Some(payload)),
                timezone.into(),
                catch_up.into(),
                first.into(),
                trace_context.into(),
            ],
        );
    });
    first
}

/// Removes the schedule `name`; returns false when there was none. Ticks already enqueued stay.
///
/// Errors: `22004` NULL name, `42501` no admin right on its queue.
#[pg_extern]
pub fn queue_unschedule(name: Option<&str>) -> bool {
    const F: &str = "queue_unschedule";
    let name = args::required(F, "name", name);
    let Some(queue) = queue_of(name) else {
        return false;
    };
    access::require_queue(F, &queue, QueuePrivilege::Admin);
    connect::connect(&JOB_PATH, |client| {
        !spi::run(client, &DELETE, &[name.into()]).is_empty()
    })
}

/// The queue of the schedule `name`, if there is one.
fn queue_of(name: &str) -> Option<String> {
    connect::connect(&JOB_PATH, |client| {
        spi::run(client, &QUEUE_OF, &[name.into()]).first(|row| row.required::<String>(1))
    })
}

/// Every schedule, with its next tick not yet enqueued and the job its last tick enqueued
/// (NULL before its first tick) — of the queues the caller may observe.
#[pg_extern(name = "queue_schedules")]
pub fn schedules() -> TableIterator<
    'static,
    (
        name!(name, String),
        name!(queue, String),
        name!(every, String),
        name!(timezone, String),
        name!(catch_up, bool),
        name!(payload, Jsonb),
        name!(next_at, TimestampWithTimeZone),
        name!(last_job_id, Option<i64>),
    ),
> {
    let mut rows = connect::connect(&WHOLE_QUEUE, |client| {
        spi::run(client, &LIST, &[]).map(|row| {
            (
                row.required::<String>(1),
                row.required::<String>(2),
                row.required(3),
                row.required(4),
                row.required(5),
                row.required(6),
                row.required(7),
                row.get(8),
            )
        })
    });
    rows.retain(|row| access::allowed(&row.1, QueuePrivilege::Observe));
    TableIterator::new(rows)
}

/// Materialises the due ticks of `queue` (`None`: of every queue), when some may be due: the
/// claim path's check, a map lookup when none is. Returns the jobs enqueued.
pub fn materialize(
    client: &mut SpiClient<'_>,
    queue: Option<&str>,
    now: TimestampWithTimeZone,
) -> usize {
    if let Some(queue) = queue {
        let earliest = earliest(client);
        if earliest.get(queue).is_none_or(|&at| at > now) {
            return 0;
        }
    } else if !release::current(client).has_0_2_0_tables() {
        return 0;
    }
    let due = spi::run(client, &DUE, &[queue.into(), now.into()]).map(|row| {
        (
            row.required::<String>(1),
            row.required::<String>(2),
            row.required::<String>(3),
            row.required::<String>(4),
            row.required::<bool>(5),
            row.required::<Jsonb>(6),
            row.required::<TimestampWithTimeZone>(7),
        )
    });
    // Kept from 0.3.0 on: the last job, and the trace context the ticks carry.
    let keeps_last_job = release::current(client) >= Release::V0_3_0;
    let enqueue_tick = if keeps_last_job {
        &ENQUEUE_TICK
    } else {
        &ENQUEUE_TICK_BEFORE_0_3_0
    };
    let mut enqueued = 0;
    for (name, queue, every, timezone, catch_up, payload, next_at) in due {
        // Both were checked when the schedule was made, but a croner or chrono-tz upgrade (or a
        // superuser's UPDATE) may leave one that no longer parses. Raising would fail every
        // claim of its queue and every tick of the maintenance worker; it is skipped instead,
        // its `next_at` kept, so that it runs again once repaired.
        let (Ok(cron), Ok(tz)) = (parse_every(&every), timezone.parse::<Tz>()) else {
            warn_unparsable(&name, &queue, &every, &timezone);
            continue;
        };
        let (ticks, next) = due_ticks(&cron, tz, to_chrono(next_at), to_chrono(now), catch_up);
        let mut last_job: Option<i64> = None;
        for tick in &ticks {
            last_job = spi::run(
                client,
                enqueue_tick,
                &[
                    queue.as_str().into(),
                    Jsonb::arg(Some(payload)),
                    from_chrono(*tick).into(),
                    now.into(),
                    name.as_str().into(),
                ],
            )
            .first(|row| row.required(1));
        }
        let next = next.map_or_else(TimestampWithTimeZone::positive_infinity, from_chrono);
        if keeps_last_job {
            spi::run(
                client,
                &ADVANCE,
                &[name.as_str().into(), next.into(), last_job.into()],
            );
        } else {
            spi::run(
                client,
                &ADVANCE_BEFORE_0_3_0,
                &[name.as_str().into(), next.into()],
            );
        }
        crate::core::counters::count(&queue, crate::core::counters::Event::Enqueued, ticks.len());
        enqueued += ticks.len();
    }
    enqueued
}

/// Says once per backend, for each definition of it, that the schedule `name` no longer parses
/// and is skipped: a claim polls every second or so, and the maintenance worker four times as
/// often.
fn warn_unparsable(name: &str, queue: &str, every: &str, timezone: &str) {
    thread_local! {
        static WARNED: RefCell<HashSet<(String, String, String)>> = RefCell::new(HashSet::new());
    }
    let definition = (name.to_owned(), every.to_owned(), timezone.to_owned());
    if WARNED.with_borrow_mut(|warned| warned.insert(definition)) {
        warning!(
            "leaseq: schedule \"{name}\" of queue \"{queue}\" no longer parses (every \"{every}\", timezone \"{timezone}\"): skipped until it is replaced with leaseq.queue_schedule"
        );
    }
}

type Earliest = HashMap<String, TimestampWithTimeZone>;

thread_local! {
    // Per backend: each queue's earliest next_at. Forgotten on a relcache invalidation of
    // leaseq.schedules (its trigger sends one for every change, materialising included), whose
    // OID is noted when it is read.
    static EARLIEST_READ: RefCell<Option<Rc<Earliest>>> = const { RefCell::new(None) };
    static SCHEDULES_TABLE: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
}

fn earliest(client: &mut SpiClient<'_>) -> Rc<Earliest> {
    if let Some(known) = EARLIEST_READ.with_borrow(|e| e.clone()) {
        return known;
    }
    SCHEDULES_TABLE.set(schema::table_oid(c"schedules"));
    // 0.1.0's schema has no schedules (served through 0.3.x: docs/design.md).
    let read: Earliest = if release::current(client).has_0_2_0_tables() {
        spi::run_latest(client, &EARLIEST, &[])
            .map(|row| {
                (
                    row.required::<String>(1),
                    row.required::<TimestampWithTimeZone>(2),
                )
            })
            .into_iter()
            .collect()
    } else {
        Earliest::new()
    };
    let read = Rc::new(read);
    EARLIEST_READ.set(Some(read.clone()));
    read
}

/// Registers the invalidation that makes `earliest` read the schedules again.
pub fn register() {
    #[pg_guard]
    unsafe extern "C-unwind" fn forget(_arg: pg_sys::Datum, relation: pg_sys::Oid) {
        if schema::concerns(relation, SCHEDULES_TABLE.get()) {
            EARLIEST_READ.set(None);
        }
    }
    // SAFETY: called once per backend, from _PG_init; the callback only clears a cell.
    unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(forget), pg_sys::Datum::from(0)) };
}

/// A five-field cron expression (no seconds, no years), by the `croner` crate.
fn parse_every(every: &str) -> Result<Cron, String> {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(every)
        .map_err(|e| {
            format!("must be a five-field cron expression (minute hour day month weekday): {e}")
        })
}

/// The first tick strictly after `after`. (Ticks fall on whole minutes; the search starts from
/// `after`'s whole second, which croner would otherwise carry into the tick.)
fn next_tick(cron: &Cron, tz: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let after = after.with_nanosecond(0).expect("0 is a valid nanosecond");
    cron.find_next_occurrence(&after.with_timezone(&tz), false)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The ticks to enqueue now, for a schedule whose next tick not yet enqueued is `next_at`
/// (≤ `now`): every tick in `[next_at, now]` when `catch_up` (at most `CATCH_UP_LIMIT`), else the
/// latest of them alone; and its next tick not yet enqueued after that (`None`: never again).
fn due_ticks(
    cron: &Cron,
    tz: Tz,
    next_at: DateTime<Utc>,
    now: DateTime<Utc>,
    catch_up: bool,
) -> (Vec<DateTime<Utc>>, Option<DateTime<Utc>>) {
    let mut ticks = Vec::new();
    let mut tick = Some(next_at);
    while let Some(at) = tick.filter(|&at| at <= now) {
        if catch_up && ticks.len() == CATCH_UP_LIMIT {
            return (ticks, Some(at));
        }
        if !catch_up {
            ticks.clear();
        }
        ticks.push(at);
        tick = next_tick(cron, tz, at);
        // Without catch-up, jump over a long downtime instead of walking every tick of it.
        if !catch_up && tick.is_some_and(|t| t <= now) {
            let whole_second = now.with_nanosecond(0).expect("0 is a valid nanosecond");
            let last = cron
                .find_previous_occurrence(&whole_second.with_timezone(&tz), true)
                .ok()
                .map(|t| t.with_timezone(&Utc))
                .filter(|&t| t > at);
            if let Some(last) = last {
                ticks.clear();
                ticks.push(last);
                tick = next_tick(cron, tz, last);
            }
        }
    }
    (ticks, tick)
}

/// PostgreSQL counts microseconds from 2000-01-01; chrono from 1970-01-01.
const EPOCH_2000: i64 = 946_684_800_000_000;

fn to_chrono(at: TimestampWithTimeZone) -> DateTime<Utc> {
    let raw: pg_sys::TimestampTz = at.into();
    Utc.timestamp_micros(raw + EPOCH_2000)
        .single()
        .expect("a finite timestamptz is a valid instant")
}

fn from_chrono(at: DateTime<Utc>) -> TimestampWithTimeZone {
    TimestampWithTimeZone::try_from(at.timestamp_micros() - EPOCH_2000)
        .expect("a cron tick is within PostgreSQL's range")
}

#[cfg(test)]
mod unit_tests {
    use chrono::{DateTime, Utc};
    use chrono_tz::Tz;

    use super::{due_ticks, next_tick, parse_every};

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    #[test]
    fn every_takes_five_fields_only() {
        assert!(parse_every("*/5 * * * *").is_ok());
        assert!(parse_every("0 9 * * 1-5").is_ok());
        assert!(parse_every("0 */5 * * * *").is_err(), "seconds");
        assert!(parse_every("* * * *").is_err());
        assert!(parse_every("61 * * * *").is_err());
        assert!(parse_every("every day").is_err());
    }

    #[test]
    fn the_next_tick_follows_the_expression_in_its_time_zone() {
        let every_5 = parse_every("*/5 * * * *").unwrap();
        assert_eq!(
            next_tick(&every_5, Tz::UTC, at("2026-11-30T10:02:30Z")),
            Some(at("2026-11-30T10:05:00Z"))
        );
        assert_eq!(
            next_tick(&every_5, Tz::UTC, at("2026-11-30T10:05:00Z")),
            Some(at("2026-11-30T10:10:00Z")),
            "strictly after"
        );
        assert_eq!(
            next_tick(&every_5, Tz::UTC, at("2026-11-30T10:02:30.123456Z")),
            Some(at("2026-11-30T10:05:00Z")),
            "on the minute, whatever the fraction of a second it started from"
        );
        // 09:00 in Paris: 08:00 UTC in winter, 07:00 UTC in summer.
        let nine = parse_every("0 9 * * *").unwrap();
        let paris: Tz = "Europe/Paris".parse().unwrap();
        assert_eq!(
            next_tick(&nine, paris, at("2026-11-30T10:00:00Z")),
            Some(at("2026-12-01T08:00:00Z"))
        );
        assert_eq!(
            next_tick(&nine, paris, at("2026-06-30T10:00:00Z")),
            Some(at("2026-07-01T07:00:00Z"))
        );
    }

    #[test]
    fn after_downtime_only_the_latest_missed_tick_unless_catch_up() {
        let hourly = parse_every("0 * * * *").unwrap();
        let (next_at, now) = (at("2026-11-30T06:00:00Z"), at("2026-11-30T10:30:00.5Z"));
        let (ticks, next) = due_ticks(&hourly, Tz::UTC, next_at, now, false);
        assert_eq!(ticks, vec![at("2026-11-30T10:00:00Z")]);
        assert_eq!(next, Some(at("2026-11-30T11:00:00Z")));
        let (ticks, next) = due_ticks(&hourly, Tz::UTC, next_at, now, true);
        assert_eq!(
            ticks,
            ["06", "07", "08", "09", "10"]
                .map(|h| at(&format!("2026-11-30T{h}:00:00Z")))
                .to_vec()
        );
        assert_eq!(next, Some(at("2026-11-30T11:00:00Z")));
    }

    #[test]
    fn nothing_is_due_before_the_tick_and_one_tick_on_it() {
        let hourly = parse_every("0 * * * *").unwrap();
        let next_at = at("2026-11-30T11:00:00Z");
        let (ticks, next) = due_ticks(&hourly, Tz::UTC, next_at, at("2026-11-30T10:59:59Z"), false);
        assert_eq!((ticks, next), (vec![], Some(next_at)));
        let (ticks, next) = due_ticks(&hourly, Tz::UTC, next_at, next_at, true);
        assert_eq!(ticks, vec![next_at]);
        assert_eq!(next, Some(at("2026-11-30T12:00:00Z")));
    }

    #[test]
    fn catch_up_stops_at_its_limit_and_resumes_from_there() {
        let minutely = parse_every("* * * * *").unwrap();
        let next_at = at("2026-11-01T00:00:00Z");
        let (ticks, next) = due_ticks(
            &minutely,
            Tz::UTC,
            next_at,
            at("2026-11-30T00:00:00Z"),
            true,
        );
        assert_eq!(ticks.len(), super::CATCH_UP_LIMIT);
        assert_eq!(next, Some(at("2026-11-01T16:40:00Z")), "the 1001st minute");
    }
}
