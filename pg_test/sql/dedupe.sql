-- Dedupe keys with a window and with replace, as a user sees them.
\pset pager off

-- Without a window, a key is free again once its job finished; with one, it stays taken for that
-- long after a success or a death — the enqueue returns the finished job's id, adds nothing.
SELECT leaseq.queue_create('life_dedupe', max_attempts => 1);
SELECT leaseq.queue_enqueue('life_dedupe', '{"day": 1}', dedupe_key => 'report-1') AS first \gset
SELECT leaseq.queue_complete(job_id, lease_token) FROM leaseq.queue_claim('life_dedupe', 'w');
SELECT leaseq.queue_enqueue('life_dedupe', '{"day": 1}', dedupe_key => 'report-1',
                            dedupe_for => '1 hour') = :first AS within_the_hour;
SELECT leaseq.queue_enqueue('life_dedupe', '{"day": 1}', dedupe_key => 'report-1',
                            dedupe_for => '10000 years') = :first AS for_ever;
-- The window is measured from the finish: an hour and a minute ago is outside an hour.
UPDATE leaseq.jobs SET finished_at = clock_timestamp() - interval '61 minutes' WHERE id = :first;
SELECT leaseq.queue_enqueue('life_dedupe', '{"day": 1}', dedupe_key => 'report-1',
                            dedupe_for => '1 hour') = :first AS after_the_hour;
SELECT count(*) AS report_1_jobs FROM leaseq.jobs WHERE dedupe_key = 'report-1';

-- A dead job holds its key for the window too; a cancelled one frees it.
SELECT leaseq.queue_enqueue('life_dedupe', '{}', dedupe_key => 'dies') AS doomed \gset
SELECT leaseq.queue_fail(job_id, lease_token) FROM leaseq.queue_claim('life_dedupe', 'w');
SELECT leaseq.queue_enqueue('life_dedupe', '{}', dedupe_key => 'dies', dedupe_for => '1 day')
       = :doomed AS dead_holds_it;
SELECT leaseq.queue_enqueue('life_dedupe', '{}', dedupe_key => 'cancelled') AS gone \gset
SELECT leaseq.queue_cancel(:gone);
SELECT leaseq.queue_enqueue('life_dedupe', '{}', dedupe_key => 'cancelled', dedupe_for => '1 day')
       <> :gone AS cancelled_frees_it;

-- Replace (debounce): a pending duplicate takes the new payload and run_at; a running one is
-- never changed.
SELECT leaseq.queue_create('life_debounce');
SELECT leaseq.queue_enqueue('life_debounce', '{"v": 1}', dedupe_key => 'doc-9',
                            run_at => clock_timestamp() + interval '1 minute') AS pending_job \gset
SELECT leaseq.queue_enqueue('life_debounce', '{"v": 2}', dedupe_key => 'doc-9',
                            run_at => clock_timestamp() + interval '5 minutes',
                            on_duplicate => 'replace') = :pending_job AS same_job;
SELECT payload, run_at > clock_timestamp() + interval '4 minutes' AS pushed_back
  FROM leaseq.jobs WHERE id = :pending_job;
SELECT leaseq.queue_enqueue('life_debounce', '{"v": 3}', dedupe_key => 'doc-9') = :pending_job
       AS ignored, (SELECT payload FROM leaseq.jobs WHERE id = :pending_job) AS unchanged;
UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE id = :pending_job;
SELECT job_id = :pending_job AS claimed FROM leaseq.queue_claim('life_debounce', 'w');
SELECT leaseq.queue_enqueue('life_debounce', '{"v": 4}', dedupe_key => 'doc-9',
                            on_duplicate => 'replace') = :pending_job AS running_duplicate,
       (SELECT payload FROM leaseq.jobs WHERE id = :pending_job) AS running_unchanged;
SELECT count(*) AS doc_9_jobs FROM leaseq.jobs WHERE dedupe_key = 'doc-9';

-- A window outlives its job's row: purging (queue_purge, and retention, which runs the same
-- purge) keeps the key and its newest finish; the window is still measured from that finish.
SELECT leaseq.queue_create('life_dedupe_purged');
SELECT leaseq.queue_enqueue('life_dedupe_purged', '{}', dedupe_key => 'once') AS once \gset
SELECT leaseq.queue_complete(job_id, lease_token) FROM leaseq.queue_claim('life_dedupe_purged', 'w');
SELECT leaseq.queue_enqueue('life_dedupe_purged', '{}', dedupe_key => 'hourly') AS hourly \gset
SELECT leaseq.queue_complete(job_id, lease_token) FROM leaseq.queue_claim('life_dedupe_purged', 'w');
UPDATE leaseq.jobs SET finished_at = clock_timestamp() - interval '61 minutes' WHERE id = :hourly;
SELECT leaseq.queue_purge('life_dedupe_purged', '0 seconds') AS purged;
SELECT count(*) AS rows_left FROM leaseq.jobs WHERE queue = 'life_dedupe_purged';
SELECT leaseq.queue_enqueue('life_dedupe_purged', '{}', dedupe_key => 'once',
                            dedupe_for => '10000 years') = :once AS for_ever_after_purge;
SELECT leaseq.queue_enqueue('life_dedupe_purged', '{}', dedupe_key => 'hourly',
                            dedupe_for => '1 hour') <> :hourly AS an_hour_after_purge_is_free;
SELECT count(*) AS jobs_after FROM leaseq.jobs WHERE queue = 'life_dedupe_purged';
