"""Where a drain's time goes, per statement: claim vs finish per job at batch 100 on one psycopg
connection, for leaseq (queue_claim + queue_complete_batch) and a bare SKIP LOCKED queue of its
own (bench.split_bare), over 20,000 jobs each. Not part of scripts/bench: a look inside section
16 while changing the job path (docs/benchmarks.md, issue 22). Usage:
    DATABASE_URL=... target/py/bin/python tools/bench/split.py leaseq bare"""
import os, sys, time, psycopg
url = os.environ["DATABASE_URL"]
systems = {
 "leaseq": ("SELECT leaseq.queue_create('bench')", "TRUNCATE leaseq.jobs, leaseq.closed_attempts",
            # queue_enqueue_batch takes at most 10,000 payloads a call: one call per 10,000
            "SELECT count(*) FROM generate_series(1, 2) AS g, LATERAL leaseq.queue_enqueue_batch('bench', ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 10000) WHERE g > 0))",
            "SELECT job_id, lease_token FROM leaseq.queue_claim('bench', 'w', 100)",
            "SELECT count(*) FROM leaseq.queue_complete_batch(%s::bigint[], %s::uuid[])", "leaseq.jobs"),
 "bare": ("CREATE SCHEMA IF NOT EXISTS bench; CREATE TABLE IF NOT EXISTS bench.split_bare (id bigserial PRIMARY KEY, queue text NOT NULL, status text NOT NULL DEFAULT 'pending', run_at timestamptz NOT NULL DEFAULT now(), leased_until timestamptz, payload jsonb); CREATE INDEX IF NOT EXISTS split_bare_due ON bench.split_bare (queue, run_at, id) WHERE status = 'pending'",
          "TRUNCATE bench.split_bare", "INSERT INTO bench.split_bare (queue, payload) SELECT 'bench', '{}' FROM generate_series(1, 20000)",
          "WITH c AS (SELECT id FROM bench.split_bare WHERE queue = 'bench' AND status = 'pending' AND run_at <= now() ORDER BY run_at, id LIMIT 100 FOR UPDATE SKIP LOCKED) UPDATE bench.split_bare b SET status = 'running', leased_until = now() + interval '30 seconds' FROM c WHERE b.id = c.id RETURNING b.id, NULL::uuid",
          "WITH f AS (UPDATE bench.split_bare SET status = 'done' WHERE id = ANY(%s::bigint[]) RETURNING 1) SELECT count(*) FROM f", "bench.split_bare"),
}
with psycopg.connect(url, autocommit=True) as c:
    for name in sys.argv[1:]:
        create, trunc, fill, claim, finish, table = systems[name]
        c.execute(create); c.execute(trunc); c.execute(fill); c.execute(f"VACUUM ANALYZE {table}")
        tc = tf = 0.0; n = 0
        while True:
            t0 = time.perf_counter(); rows = c.execute(claim).fetchall(); t1 = time.perf_counter()
            if not rows: break
            if name == "bare": c.execute(finish, ([r[0] for r in rows],))
            else: c.execute(finish, ([r[0] for r in rows], [r[1] for r in rows]))
            t2 = time.perf_counter(); tc += t1 - t0; tf += t2 - t1; n += len(rows)
        print(f"{name}: {n} jobs: claim {tc*1e6/n:.1f} us/job, finish {tf*1e6/n:.1f} us/job")
