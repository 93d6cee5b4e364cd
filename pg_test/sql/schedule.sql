-- Periodic jobs, as a user sees them: a schedule, its next tick, the claim that materialises
-- due ticks (one job per tick), downtime with and without catch-up, unscheduling.
\pset pager off

SELECT leaseq.queue_create('life_cron');
SELECT leaseq.queue_schedule('rollup', 'life_cron', '*/5 * * * *', '{"report": "rollup"}')
       - clock_timestamp() BETWEEN interval '0' AND interval '5 minutes' AS first_tick_within_5_minutes;
SELECT name, queue, every, timezone, catch_up, payload,
       extract(minute FROM next_at)::int % 5 = 0 AND extract(second FROM next_at) = 0 AS on_a_tick,
       last_job_id
  FROM leaseq.queue_schedules();

-- Not due (the next tick an hour ahead, however close the clock is to a tick): a claim enqueues
-- nothing.
UPDATE leaseq.schedules SET next_at = clock_timestamp() + interval '1 hour' WHERE name = 'rollup';
SELECT count(*) AS claimed FROM leaseq.queue_claim('life_cron', 'w');

-- Three ticks were missed (the schedule's next tick is moved back, as after downtime): the claim
-- enqueues the latest alone, due at its tick, and claims it; the next tick is ahead again.
UPDATE leaseq.schedules SET next_at = date_trunc('hour', clock_timestamp()) - interval '15 minutes'
 WHERE name = 'rollup';
CREATE TEMP TABLE cron_claimed AS SELECT * FROM leaseq.queue_claim('life_cron', 'w', 10);
SELECT c.payload, j.run_at <= clock_timestamp() AS due,
       clock_timestamp() - j.run_at < interval '5 minutes' AS the_latest_tick,
       extract(minute FROM j.run_at)::int % 5 = 0 AND extract(second FROM j.run_at) = 0 AS on_a_tick
  FROM cron_claimed AS c JOIN leaseq.jobs AS j ON j.id = c.job_id;
SELECT next_at > clock_timestamp() AS next_tick_ahead FROM leaseq.schedules WHERE name = 'rollup';
SELECT count(*) AS claimed_again FROM leaseq.queue_claim('life_cron', 'w', 10);
-- The schedule names the job its last tick enqueued: the one just claimed.
SELECT s.last_job_id = c.job_id AS last_job_is_the_tick
  FROM leaseq.queue_schedules() AS s, cron_claimed AS c WHERE s.name = 'rollup';

-- With catch_up, every missed tick is enqueued: one hour of five-minute ticks, and the current.
SELECT leaseq.queue_schedule('rollup', 'life_cron', '*/5 * * * *', '{"report": "caught up"}',
                             catch_up => true) IS NOT NULL AS replaced;
UPDATE leaseq.schedules SET next_at = date_trunc('minute', clock_timestamp())
                                      - (extract(minute FROM clock_timestamp())::int % 5) * interval '1 minute'
                                      - interval '1 hour'
 WHERE name = 'rollup';
CREATE TEMP TABLE cron_caught_up AS SELECT * FROM leaseq.queue_claim('life_cron', 'w', 100);
-- (13 ticks: 12 past and the current one; 14 if the clock passed a tick meanwhile.)
SELECT count(*) BETWEEN 13 AND 14 AS caught_up, count(DISTINCT j.run_at) = count(*) AS distinct_ticks,
       min(j.run_at) = (SELECT min(run_at) FROM leaseq.jobs WHERE payload->>'report' = 'caught up')
           AS from_the_first_missed
  FROM cron_caught_up AS c JOIN leaseq.jobs AS j ON j.id = c.job_id;
-- The last of them is the last job.
SELECT s.last_job_id = (SELECT max(job_id) FROM cron_caught_up) AS last_job_is_the_latest_tick
  FROM leaseq.queue_schedules() AS s WHERE s.name = 'rollup';

-- A time zone and its daylight saving time: 09:00 in Paris.
SELECT leaseq.queue_schedule('morning', 'life_cron', '0 9 * * *', '{}', timezone => 'Europe/Paris')
       AT TIME ZONE 'Europe/Paris' AS local_first_tick_time \gset
SELECT extract(hour FROM :'local_first_tick_time'::timestamp) AS local_hour;

-- Unscheduled: nothing more; a second time, nothing to remove.
SELECT leaseq.queue_unschedule('rollup') AS removed, leaseq.queue_unschedule('rollup') AS again;
SELECT name FROM leaseq.queue_schedules();

-- A stored schedule that no longer parses (here a superuser's UPDATE; in life a croner or
-- chrono-tz upgrade) is skipped with a WARNING, once per backend, instead of failing every claim
-- of its queue (and every tick of the maintenance worker); it stays due until replaced.
SELECT leaseq.queue_create('cron_broken');
SELECT leaseq.queue_schedule('broken', 'cron_broken', '* * * * *', '{"tick": 1}') IS NOT NULL AS scheduled;
SELECT leaseq.queue_enqueue('cron_broken', '{"plain": 1}') > 0 AS enqueued;
UPDATE leaseq.schedules SET timezone = 'Bogus/Zone', next_at = clock_timestamp() - interval '1 minute'
 WHERE name = 'broken';
SELECT payload FROM leaseq.queue_claim('cron_broken', 'w');
SELECT count(*) AS claimed_quietly FROM leaseq.queue_claim('cron_broken', 'w');
SELECT next_at < clock_timestamp() AS still_due FROM leaseq.schedules WHERE name = 'broken';
-- Replaced, it ticks again.
SELECT leaseq.queue_schedule('broken', 'cron_broken', '* * * * *', '{"tick": 2}') IS NOT NULL AS replaced;
UPDATE leaseq.schedules SET next_at = clock_timestamp() - interval '1 minute' WHERE name = 'broken';
SELECT payload FROM leaseq.queue_claim('cron_broken', 'w');
SELECT leaseq.queue_unschedule('broken') AS removed;
