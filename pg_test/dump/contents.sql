-- Everything leaseq holds in a database, one line per table: its rows in a stable order, hashed,
-- and where the job id sequence stands. Run on a database and on its pg_dump restored
-- elsewhere, the outputs must agree.
SELECT 'queues', count(*), md5(coalesce(string_agg(q::text, ',' ORDER BY q.name), ''))
  FROM leaseq.queues AS q
UNION ALL
SELECT 'jobs', count(*), md5(coalesce(string_agg(j::text, ',' ORDER BY j.id), ''))
  FROM leaseq.jobs AS j
UNION ALL
SELECT 'closed_attempts', count(*),
       md5(coalesce(string_agg(a::text, ',' ORDER BY a.job_id, a.attempt_no), ''))
  FROM leaseq.closed_attempts AS a
UNION ALL
SELECT 'queue_grants', count(*),
       md5(coalesce(string_agg(g::text, ',' ORDER BY g.queue, g.role::text, g.privilege), ''))
  FROM leaseq.queue_grants AS g
UNION ALL
SELECT 'jobs_id_seq', last_value, is_called::text FROM leaseq.jobs_id_seq;
