-- On a restored copy: every running job whose lease is still live finishes with the token it
-- held in the original, and a new job takes an id after every restored one. Prints: those
-- running jobs and how many finished, then whether the new id is past the old ones.
WITH running AS (
    SELECT id, lease_token FROM leaseq.jobs
     WHERE status = 'running' AND lease_expires_at > clock_timestamp() + interval '1 second'
), finished AS (
    SELECT count(*) FILTER (WHERE leaseq.queue_complete(id, lease_token)) AS n FROM running
)
SELECT (SELECT count(*) FROM running) AS running, (SELECT n FROM finished) AS finished_with_old_tokens;
SELECT leaseq.queue_create('restored');
SELECT leaseq.queue_enqueue('restored', '{}') > (SELECT max(id) FROM leaseq.jobs WHERE queue <> 'restored')
       AS new_id_after_restored_ones;
