//! The clock every decision reads: the server's, `clock_timestamp()`, read once per call and
//! passed to the statements as a parameter, so all of one call's decisions use the same instant
//! and index conditions stay plain comparisons.
//!
//! **The test hook.** `leaseq.clock_offset` (superusers only, 0 by default) moves this clock
//! forward, so that tests of leases, backoff, history and schedules jump instead of waiting out
//! real time (River's injectable clock). Nothing else reads the offset: in production it is 0.
use pgrx::prelude::*;

use crate::core::settings;

const MICROS_PER_SECOND: i64 = 1_000_000;

/// `clock_timestamp()`, moved by the test hook when a test set it.
pub fn now() -> TimestampWithTimeZone {
    // SAFETY: reads the system clock; no state involved.
    let raw = unsafe { pg_sys::GetCurrentTimestamp() };
    let offset = i64::from(settings::clock_offset_seconds()) * MICROS_PER_SECOND;
    TimestampWithTimeZone::try_from(raw.saturating_add(offset))
        .expect("the server clock, moved by at most 68 years, is a valid timestamp")
}

/// `at` plus `micros` microseconds.
pub fn plus_micros(at: TimestampWithTimeZone, micros: i64) -> TimestampWithTimeZone {
    let raw: pg_sys::TimestampTz = at.into();
    TimestampWithTimeZone::try_from(raw.saturating_add(micros))
        .expect("a finite time moved by a validated interval is a valid timestamp")
}

/// A time as the server stores it: µs since 2000-01-01, `i64::MAX` infinity.
pub fn from_raw(raw: pg_sys::TimestampTz) -> TimestampWithTimeZone {
    TimestampWithTimeZone::try_from(raw)
        .expect("a time read from the database is a valid timestamp")
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn the_test_clock_moves_leases_forward() {
        Spi::run("SELECT leaseq.queue_create('clock_moved', lease => '1 minute')").unwrap();
        Spi::run("SELECT leaseq.queue_enqueue('clock_moved', '{}')").unwrap();
        Spi::run("SET LOCAL leaseq.clock_offset = '2h'").unwrap();
        let moved = Spi::get_one::<bool>(
            "SELECT lease_expires_at > clock_timestamp() + interval '2 hours'
               FROM leaseq.queue_claim('clock_moved', 'w')",
        );
        assert_eq!(moved, Ok(Some(true)));
    }
}
