"""A held snapshot (REPEATABLE READ, 30 s) against a bare SKIP LOCKED queue of its own (table cq),
4 connections claiming one job at a time and finishing it with the next one's enqueue: claims from
the head of the due index (`head`) vs claims after a per-connection cursor, the key of the last
job it claimed, with a scan from the head when nothing follows it or once a second (`cursor`).
Prints jobs/s per 5 s window: 10 s before, 30 s held, 10 s after. Not part of scripts/bench: the
measurement behind the claim-cursor direction of issue 22 (docs/benchmarks.md). Usage:
    DATABASE_URL=... target/py/bin/python tools/bench/hold_cursor.py head|cursor"""
import os, sys, threading, time, psycopg
url = os.environ["DATABASE_URL"]; mode = sys.argv[1]
BEFORE, HOLD, AFTER, WINDOW = 10, 30, 10, 5
with psycopg.connect(url, autocommit=True) as c:
    c.execute("DROP TABLE IF EXISTS cq; CREATE TABLE cq (id bigserial PRIMARY KEY, status text NOT NULL DEFAULT 'pending', run_at timestamptz NOT NULL DEFAULT now(), payload jsonb)")
    c.execute("CREATE INDEX cq_due ON cq (run_at, id) WHERE status = 'pending'")
    c.execute("INSERT INTO cq (payload) SELECT '{}' FROM generate_series(1, 10000)")
    c.execute("VACUUM ANALYZE cq")
HEAD = "WITH c AS (SELECT id, run_at FROM cq WHERE status = 'pending' AND run_at <= now() ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) UPDATE cq SET status = 'running' FROM c WHERE cq.id = c.id RETURNING cq.id, c.run_at"
AFTER_CURSOR = "WITH c AS (SELECT id, run_at FROM cq WHERE status = 'pending' AND run_at <= now() AND (run_at, id) > (%s, %s) ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) UPDATE cq SET status = 'running' FROM c WHERE cq.id = c.id RETURNING cq.id, c.run_at"
FINISH = "WITH f AS (UPDATE cq SET status = 'done' WHERE id = %s) INSERT INTO cq (payload) VALUES ('{}')"
done = [0]; stop = [False]; lock = threading.Lock()
def worker():
    with psycopg.connect(url, autocommit=True) as c:
        cursor = None; rescan_at = 0.0
        while not stop[0]:
            if mode == "cursor" and cursor is not None and time.monotonic() < rescan_at:
                rows = c.execute(AFTER_CURSOR, cursor).fetchall()
                if not rows:  # nothing after the cursor: look from the head
                    rows = c.execute(HEAD).fetchall(); rescan_at = time.monotonic() + 1.0
            else:
                rows = c.execute(HEAD).fetchall(); rescan_at = time.monotonic() + 1.0
            for job_id, run_at in rows:
                cursor = (run_at, job_id)
                c.execute(FINISH, (job_id,))
            with lock: done[0] += len(rows)
threads = [threading.Thread(target=worker) for _ in range(4)]
for t in threads: t.start()
time.sleep(3)
holder = psycopg.connect(url)
start = time.monotonic(); last = done[0]; t = 0; out = []
while t < BEFORE + HOLD + AFTER:
    time.sleep(WINDOW); t += WINDOW
    now = done[0]; out.append((t, (now - last) / WINDOW)); last = now
    if t == BEFORE:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ"); holder.execute("SELECT count(*) FROM cq")
    if t == BEFORE + HOLD:
        holder.rollback()
stop[0] = True
for th in threads: th.join()
print(mode, " ".join(f"{r:.0f}" for _, r in out))
