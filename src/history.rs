//! History: each attempt is written once, when it closes. While it is open it lives on the job's
//! row (`lease_token`, `worker`, `started_at`); the statement that takes the job out of
//! `running` — complete, fail, reclaim, cancel — inserts it into `leaseq.closed_attempts` in the
//! same statement, so history and the job's state never disagree.

/// The INSERT that closes the attempt of each row of `$from` (a CTE of jobs just taken out of
/// `running`, with their `id`, `worker` and `started_at`). The attempt is numbered `MAX + 1` over
/// the job's closed attempts — the very number `queue_claim` handed out, since nothing else writes
/// a job's history while its attempt is open (the job's row lock and lease token say who may).
/// `token`, `ended_at`, `outcome` and `error` are SQL expressions over `$from` and the parameters.
macro_rules! close_attempt {
    (from: $from:literal, token: $token:literal, ended_at: $ended:literal,
     outcome: $outcome:literal, error: $error:literal) => {
        concat!(
            "INSERT INTO leaseq.closed_attempts
                    (job_id, attempt_no, lease_token, worker, started_at, ended_at, outcome, error)
             SELECT j.id, coalesce((SELECT max(c.attempt_no) FROM leaseq.closed_attempts c
                                     WHERE c.job_id = j.id), 0) + 1,
                    ",
            $token,
            ", j.worker, j.started_at, ",
            $ended,
            ", ",
            $outcome,
            ", ",
            $error,
            "
               FROM ",
            $from,
            " AS j
             RETURNING job_id"
        )
    };
}

/// The SET list of a job leaving `running` for a retry or for good: `dead` (a boolean SQL
/// expression) sends it to `dead`, otherwise it is `pending` again at `run_at`; the lease is
/// cleared so no stale token matches; `error` becomes its `last_error`; `now` stamps it. Shared by
/// fail, fail_batch and reclaim, which differ only in where these values come from.
macro_rules! retry_or_bury {
    (dead: $dead:literal, run_at: $run_at:literal, error: $error:literal, now: $now:literal) => {
        concat!(
            "status = CASE WHEN ",
            $dead,
            " THEN 'dead' ELSE 'pending' END::leaseq.job_status,
                     run_at = CASE WHEN ",
            $dead,
            " THEN j.run_at ELSE ",
            $run_at,
            " END,
                     lease_token = NULL,
                     lease_expires_at = NULL,
                     last_error = ",
            $error,
            ",
                     updated_at = ",
            $now,
            ",
                     finished_at = CASE WHEN ",
            $dead,
            " THEN ",
            $now,
            " END"
        )
    };
}
