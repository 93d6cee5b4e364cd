-- Flows (src/lifecycle/flow.rs): a graph of jobs in one call, checked whole before anything is
-- inserted, enqueued parents first; a fan-in node runs once all its parents succeeded.
\pset pager off
SELECT leaseq.queue_create('flow_fetch');
SELECT leaseq.queue_create('flow_report');

-- fetch → three resizes (fan-out) → report (fan-in), across two queues, given children first.
CREATE TEMP TABLE flow AS
SELECT * FROM leaseq.queue_flow($$[
    {"key": "report", "queue": "flow_report", "payload": {"big": 123456789012345678901234567890},
     "depends_on": ["resize-1", "resize-2", "resize-3"], "on_parent_failure": "run"},
    {"key": "resize-1", "queue": "flow_fetch", "payload": {"n": 1}, "depends_on": ["fetch"]},
    {"key": "resize-2", "queue": "flow_fetch", "payload": {"n": 2}, "depends_on": ["fetch"]},
    {"key": "resize-3", "queue": "flow_fetch", "payload": {"n": 3}, "depends_on": ["fetch"],
     "priority": 5, "max_attempts": 1},
    {"key": "fetch", "queue": "flow_fetch"},
    {"key": "null", "queue": "flow_fetch", "payload": null, "depends_on": ["report"]}
]$$);
-- Keys come back in the order given; parents got smaller ids than their children.
SELECT key FROM flow;
SELECT bool_and(p.job_id < c.job_id) AS parents_first
  FROM flow c JOIN leaseq.job_parents e ON e.child_id = c.job_id JOIN flow p ON p.job_id = e.parent_id;
-- No payload: {}; a null payload is kept, as queue_enqueue keeps it.
SELECT f.key, j.queue, j.status, j.priority, j.max_attempts, j.payload
  FROM flow f JOIN leaseq.jobs j ON j.id = f.job_id ORDER BY f.job_id;
SELECT job_id AS root FROM flow WHERE key = 'fetch' \gset
SELECT * FROM leaseq.queue_flow_status(:root);

-- fetch runs, then the resizes; one of them fails for good; the report runs anyway.
SELECT leaseq.queue_complete(job_id, lease_token, '{"pages": 3}') AS fetched
  FROM leaseq.queue_claim('flow_fetch', 'w');
SELECT * FROM leaseq.queue_flow_status(:root);
SELECT count(*) FILTER (WHERE job_id = (SELECT job_id FROM flow WHERE key = 'resize-3')
                          AND leaseq.queue_fail(job_id, lease_token) = 'dead')
       + count(*) FILTER (WHERE job_id <> (SELECT job_id FROM flow WHERE key = 'resize-3')
                            AND leaseq.queue_complete(job_id, lease_token)) AS resizes_finished
  FROM leaseq.queue_claim('flow_fetch', 'w', 10);
SELECT * FROM leaseq.queue_flow_status(:root);
SELECT f.key AS claimed, c.payload
  FROM leaseq.queue_claim('flow_report', 'w') AS c JOIN flow f ON f.job_id = c.job_id;
SELECT f.key AS parent, p.status
  FROM leaseq.queue_parents((SELECT job_id FROM flow WHERE key = 'report')) AS p
  JOIN flow f ON f.job_id = p.parent_id ORDER BY f.key;

-- A flow is one call in the caller's transaction: rolled back, nothing of it stays.
SELECT count(*) AS jobs_before FROM leaseq.jobs \gset
BEGIN;
SELECT count(*) AS enqueued FROM leaseq.queue_flow('[{"key": "a", "queue": "flow_fetch"},
                                                     {"key": "b", "queue": "flow_fetch", "depends_on": ["a"]}]');
ROLLBACK;
SELECT count(*) = :jobs_before AS nothing_left FROM leaseq.jobs;
