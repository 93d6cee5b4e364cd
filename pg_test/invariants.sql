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
                   WHEN job.status = 'running'
                        AND NOT EXISTS (SELECT FROM leaseq.leases AS lease
                                         WHERE lease.queue = job.queue
                                           AND job.id = ANY (lease.job_ids)
                                           AND lease.token = job.lease_token
                                           AND lease.expires_at <= job.lease_expires_at)
                       THEN 'a lease row with its token covers every running job, ending no later'
                   WHEN job.lease_token IS NOT NULL
                        AND (job.worker IS NULL OR job.started_at IS NULL)
                       THEN 'the attempt on the row has its worker and start'
                   WHEN (job.finished_at IS NOT NULL)
                        <> (job.status IN ('succeeded', 'dead', 'cancelled'))
                       THEN 'finished_at set exactly on final jobs'
                   WHEN job.attempts > job.max_attempts
                       THEN 'attempts within the budget'
                   WHEN job.status = 'waiting' AND job.group_key IS NULL
                       THEN 'only a job of a group waits'
                   WHEN job.status = 'waiting'
                        AND (SELECT count(*) FROM leaseq.jobs AS admitted
                              WHERE admitted.queue = job.queue
                                AND admitted.group_key = job.group_key
                                AND admitted.status IN ('pending', 'running'))
                            < (SELECT queue.group_concurrency FROM leaseq.queues AS queue
                                WHERE queue.name = job.queue)
                       THEN 'a job waits only while its group is full'
                   WHEN job.status = 'blocked'
                        AND NOT EXISTS (SELECT FROM leaseq.job_parents AS edge
                                         WHERE edge.child_id = job.id)
                       THEN 'only a job with parents is blocked'
                   WHEN job.status = 'blocked'
                        AND NOT EXISTS (SELECT FROM leaseq.job_parents AS edge
                                          JOIN leaseq.jobs AS parent ON parent.id = edge.parent_id
                                         WHERE edge.child_id = job.id
                                           AND (parent.finished_at IS NULL
                                                OR (parent.status <> 'succeeded'
                                                    AND edge.on_parent_failure <> 'run')))
                       THEN 'no blocked job whose parents let it run'
                   WHEN job.started_at IS NOT NULL
                        AND EXISTS (SELECT FROM leaseq.job_parents AS edge
                                      JOIN leaseq.jobs AS parent ON parent.id = edge.parent_id
                                     WHERE edge.child_id = job.id
                                       AND edge.on_parent_failure <> 'run'
                                       AND parent.status <> 'succeeded')
                       THEN 'no child runs before its parents succeeded'
               END AS broken_rule
          FROM leaseq.jobs AS job) AS checked
 WHERE checked.broken_rule IS NOT NULL
 ORDER BY checked.id;
