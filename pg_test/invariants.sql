-- What every job row satisfies after any sequence of leaseq calls: the rows that break it, each
-- with the first rule it breaks. No CHECK enforces these (sql/schema.sql says why): scripts/test
-- runs this on every database its suites leave behind, and the chaos checker on its run's jobs;
-- a row here fails them.
SELECT checked.id, checked.queue, checked.status, checked.broken_rule
  FROM (SELECT job.id, job.queue, job.status,
               CASE
                   WHEN (job.status = 'running') <> (job.lease_expires_at IS NOT NULL)
                       THEN 'a lease exactly while running'
                   WHEN CASE job.status WHEN 'running' THEN job.lease_token IS NULL
                                        WHEN 'succeeded' THEN false
                                        ELSE job.lease_token IS NOT NULL END
                       THEN 'a token while running, kept or not once succeeded, never otherwise'
                   WHEN job.lease_token IS NOT NULL
                        AND (job.worker IS NULL OR job.started_at IS NULL)
                       THEN 'the attempt on the row has its worker and start'
                   WHEN (job.finished_at IS NOT NULL)
                        <> (job.status IN ('succeeded', 'dead', 'cancelled'))
                       THEN 'finished_at set exactly on final jobs'
                   WHEN job.attempts > job.max_attempts
                       THEN 'attempts within the budget'
               END AS broken_rule
          FROM leaseq.jobs AS job) AS checked
 WHERE checked.broken_rule IS NOT NULL
 ORDER BY checked.id;
