//! The retry policy, as pure functions (no PostgreSQL): time and randomness come in as inputs.

/// A queue's backoff settings, in microseconds.
#[derive(Clone, Copy, Debug)]
pub struct BackoffPolicy {
    pub base_micros: i64,
    pub cap_micros: i64,
}

/// The delay before the retry that follows `attempt` failed attempts (`attempt >= 1`):
/// full jitter, uniform in `[0, min(cap, base · 2^(attempt−1))]`, so jobs that failed together
/// don't retry together. Saturates instead of overflowing for large attempt numbers.
pub fn retry_delay(attempt: i32, policy: BackoffPolicy, rng: &mut impl rand::Rng) -> i64 {
    let ceiling = backoff_ceiling(attempt, policy);
    if ceiling <= 0 {
        0
    } else {
        rng.random_range(0..=ceiling)
    }
}

/// `min(cap, base · 2^(attempt−1))` in microseconds, the upper bound of [`retry_delay`].
pub fn backoff_ceiling(attempt: i32, policy: BackoffPolicy) -> i64 {
    let exponent = attempt.saturating_sub(1).clamp(0, 62) as u32;
    let grown = policy.base_micros.saturating_mul(1_i64 << exponent);
    grown.min(policy.cap_micros).max(0)
}

#[cfg(test)]
mod unit_tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    const SECOND: i64 = 1_000_000;
    const POLICY: BackoffPolicy = BackoffPolicy {
        base_micros: SECOND,
        cap_micros: 300 * SECOND,
    };

    #[test]
    fn ceiling_doubles_per_attempt_from_base() {
        assert_eq!(backoff_ceiling(1, POLICY), SECOND);
        assert_eq!(backoff_ceiling(2, POLICY), 2 * SECOND);
        assert_eq!(backoff_ceiling(5, POLICY), 16 * SECOND);
    }

    #[test]
    fn ceiling_never_exceeds_cap_even_for_huge_attempt_numbers() {
        assert_eq!(backoff_ceiling(10, POLICY), 300 * SECOND);
        assert_eq!(backoff_ceiling(64, POLICY), 300 * SECOND);
        assert_eq!(backoff_ceiling(i32::MAX, POLICY), 300 * SECOND);
    }

    #[test]
    fn attempt_zero_or_negative_is_treated_as_the_first() {
        assert_eq!(backoff_ceiling(0, POLICY), SECOND);
        assert_eq!(backoff_ceiling(-5, POLICY), SECOND);
    }

    #[test]
    fn retry_delay_stays_within_zero_and_ceiling() {
        let mut rng = StdRng::seed_from_u64(7);
        for attempt in 1..40 {
            for _ in 0..200 {
                let delay = retry_delay(attempt, POLICY, &mut rng);
                assert!((0..=backoff_ceiling(attempt, POLICY)).contains(&delay));
            }
        }
    }

    #[test]
    fn retry_delay_varies_and_spreads_over_the_range() {
        let mut rng = StdRng::seed_from_u64(42);
        let delays: Vec<i64> = (0..1000)
            .map(|_| retry_delay(9, POLICY, &mut rng))
            .collect();
        let ceiling = backoff_ceiling(9, POLICY);
        let distinct: std::collections::HashSet<_> = delays.iter().collect();
        assert!(distinct.len() > 900, "full jitter draws distinct delays");
        assert!(
            delays.iter().any(|&d| d < ceiling / 4),
            "some retries come early"
        );
        assert!(
            delays.iter().any(|&d| d > ceiling * 3 / 4),
            "some retries come late"
        );
        let mean = delays.iter().sum::<i64>() / delays.len() as i64;
        assert!(
            (ceiling * 4 / 10..ceiling * 6 / 10).contains(&mean),
            "uniform: mean near half"
        );
    }
}
