-- trace_context: the producer's W3C traceparent, kept exactly from the enqueue — of one job
-- (plain, keyed, in a group, with parents), of a batch, of a flow — to the claim that returns
-- it to the worker; NULL for a job enqueued without one.
\pset pager off
SELECT leaseq.queue_create('traced');
SELECT leaseq.queue_enqueue('traced', '{"n": 1}',
       trace_context => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01') > 0 AS one;
SELECT count(*) AS batch FROM leaseq.queue_enqueue_batch('traced', ARRAY['{"n": 2}', '{"n": 3}']::jsonb[],
       trace_context => '00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01');
SELECT leaseq.queue_enqueue('traced', '{"n": 4}') > 0 AS untraced;
SELECT leaseq.queue_enqueue('traced', '{"n": 5}', dedupe_key => 'k',
       trace_context => '00-11111111111111111111111111111111-2222222222222222-01') > 0 AS keyed;
SELECT leaseq.queue_enqueue('traced', '{"n": 6}', group_key => 'g',
       trace_context => '00-33333333333333333333333333333333-4444444444444444-00') > 0 AS grouped;
SELECT count(*) AS grouped_batch FROM leaseq.queue_enqueue_batch('traced', ARRAY['{"n": 7}']::jsonb[],
       group_keys => ARRAY['h'],
       trace_context => '00-55555555555555555555555555555555-6666666666666666-01');
SELECT key, job_id > 0 AS enqueued FROM leaseq.queue_flow(
       '[{"key": "a", "queue": "traced", "payload": {"n": 8}},
         {"key": "b", "queue": "traced", "payload": {"n": 9}, "depends_on": ["a"]}]',
       trace_context => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01');
SELECT count(*) AS with_parents FROM leaseq.queue_enqueue_batch('traced', ARRAY['{"n": 10}']::jsonb[],
       depends_on => ARRAY(SELECT id FROM leaseq.jobs WHERE queue = 'traced' AND payload = '{"n": 4}'),
       trace_context => '00-77777777777777777777777777777777-8888888888888888-01');

SELECT (payload->>'n')::int AS n, trace_context
  FROM leaseq.queue_claim('traced', 'w', 100) ORDER BY 1;
-- The blocked ones keep theirs until they run.
SELECT (payload->>'n')::int AS n, status, trace_context
  FROM leaseq.jobs WHERE queue = 'traced' AND status = 'blocked' ORDER BY 1;

-- A schedule's ticks carry the schedule's.
SELECT leaseq.queue_create('traced_cron');
SELECT leaseq.queue_schedule('traced_cron', 'traced_cron', '* * * * *', '{"tick": true}',
       trace_context => '00-99999999999999999999999999999999-aaaaaaaaaaaaaaaa-01') IS NOT NULL AS scheduled;
UPDATE leaseq.schedules SET next_at = now() - interval '1 minute' WHERE name = 'traced_cron';
SELECT payload, trace_context FROM leaseq.queue_claim('traced_cron', 'w');
