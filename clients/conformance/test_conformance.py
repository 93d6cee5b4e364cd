"""One conformance suite, every client: the same scenarios run against the worker program of the
Rust, Python and Node clients (worker.rs in client/examples, worker.py, worker.mjs), with real
processes and real signals. Every check reads the database, never the workers' own words."""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

import leaseq
from proxy import Partition

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CLIENTS: dict[str, list[str]] = {
    "rust": [str(ROOT / "target/debug/examples/conformance_worker")],
    "python": [str(ROOT / "target/py/bin/python"), str(HERE / "worker.py")],
    "node": ["node", str(HERE / "worker.mjs")],
}
_queues = itertools.count()


@pytest.fixture(scope="session")
def url() -> str:
    found = os.environ.get("LEASEQ_TEST_DATABASE_URL")
    if not found:
        raise pytest.UsageError("set LEASEQ_TEST_DATABASE_URL (scripts/test does)")
    with psycopg.connect(found, autocommit=True) as c:
        c.execute("""CREATE TABLE IF NOT EXISTS conformance_log (
                         job_id bigint, attempt int, pid int, event text,
                         at timestamptz NOT NULL DEFAULT clock_timestamp())""")
        c.execute("""CREATE TABLE IF NOT EXISTS conformance_effects (
                         job_id bigint, attempt int, pid int)""")
    return found


@pytest.fixture
def db(url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(url, autocommit=True) as c:
        yield c


@pytest.fixture
def client(url: str) -> Iterator[leaseq.Client]:
    with leaseq.Client(url) as c:
        yield c


@pytest.fixture(params=sorted(CLIENTS))
def spawn(request: pytest.FixtureRequest, url: str) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Starts the worker program of one client: `spawn(queue, CONCURRENCY=..., ...)`."""
    started: list[subprocess.Popen[str]] = []

    def start(queue: str, database_url: str | None = None, **settings: Any) -> subprocess.Popen[str]:
        env = {**os.environ, "DATABASE_URL": database_url or url, "QUEUE": queue}
        env.update({k: str(v) for k, v in settings.items()})
        process = subprocess.Popen(
            CLIENTS[request.param], env=env, stderr=subprocess.PIPE, text=True
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.communicate()


def new_queue(client: leaseq.Client, **settings: Any) -> str:
    name = f"conf_{os.getpid()}_{next(_queues)}"
    client.queue_create(name, **settings)
    return name


def eventually(check: Callable[[], bool], seconds: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


def started(db: psycopg.Connection[Any], job_id: int, pid: int) -> bool:
    row = db.execute(
        "SELECT count(*) FROM conformance_log WHERE job_id = %s AND pid = %s AND event = 'start'",
        (job_id, pid),
    ).fetchone()
    return row is not None and row[0] > 0


def status(client: leaseq.Client, job_id: int) -> leaseq.JobStatus:
    return client.job(job_id).status


def effects(db: psycopg.Connection[Any], job_id: int) -> list[int]:
    rows = db.execute("SELECT pid FROM conformance_effects WHERE job_id = %s", (job_id,)).fetchall()
    return [r[0] for r in rows]


def outcomes(client: leaseq.Client, job_id: int) -> list[leaseq.AttemptOutcome]:
    return [a.outcome for a in client.attempts(job_id)]


def test_a_killed_worker_costs_one_lease_and_its_job_is_done_once(
    spawn: Callable[..., subprocess.Popen[str]], db: psycopg.Connection[Any], client: leaseq.Client
) -> None:
    queue = new_queue(client, lease=timedelta(seconds=1), backoff_base=timedelta(milliseconds=100))
    job_id = client.enqueue(queue, {"ms": 1500})
    first = spawn(queue, TRANSACTIONAL=1)
    eventually(lambda: started(db, job_id, first.pid), what="the first worker started the job")
    first.kill()
    first.wait()
    second = spawn(queue, TRANSACTIONAL=1)
    eventually(lambda: status(client, job_id) is leaseq.JobStatus.SUCCEEDED, what="completed")
    assert outcomes(client, job_id) == [
        leaseq.AttemptOutcome.LEASE_EXPIRED,
        leaseq.AttemptOutcome.SUCCEEDED,
    ]
    assert effects(db, job_id) == [second.pid], "the effect once, by the worker that completed"


def test_a_paused_worker_can_finish_nothing_and_its_effect_rolls_back(
    spawn: Callable[..., subprocess.Popen[str]], db: psycopg.Connection[Any], client: leaseq.Client
) -> None:
    queue = new_queue(client, lease=timedelta(seconds=1), backoff_base=timedelta(milliseconds=100))
    job_id = client.enqueue(queue, {"ms": 400})
    paused = spawn(queue, TRANSACTIONAL=1)
    eventually(lambda: started(db, job_id, paused.pid), what="the job started")
    paused.send_signal(signal.SIGSTOP)
    other = spawn(queue, TRANSACTIONAL=1)
    eventually(lambda: status(client, job_id) is leaseq.JobStatus.SUCCEEDED, what="taken over")
    other.send_signal(signal.SIGTERM)
    other.wait(timeout=20)
    paused.send_signal(signal.SIGCONT)
    time.sleep(1.5)  # its handler ends, its completion is refused, its transaction rolls back
    paused.send_signal(signal.SIGTERM)
    assert paused.wait(timeout=20) == 0
    assert effects(db, job_id) == [other.pid], "the paused worker's effect was rolled back"
    assert outcomes(client, job_id) == [
        leaseq.AttemptOutcome.LEASE_EXPIRED,
        leaseq.AttemptOutcome.SUCCEEDED,
    ]
    assert client.job(job_id).result == f'{{"pid": {other.pid}}}'


def test_sigterm_drains_the_running_job_and_exits_0(
    spawn: Callable[..., subprocess.Popen[str]], db: psycopg.Connection[Any], client: leaseq.Client
) -> None:
    queue = new_queue(client)
    job_id = client.enqueue(queue, {"ms": 500})
    worker = spawn(queue)
    eventually(lambda: started(db, job_id, worker.pid), what="the job started")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    assert status(client, job_id) is leaseq.JobStatus.SUCCEEDED


def test_sigterm_with_prefetch_hands_back_the_unstarted_jobs_with_no_attempt_spent(
    spawn: Callable[..., subprocess.Popen[str]], db: psycopg.Connection[Any], client: leaseq.Client
) -> None:
    queue = new_queue(client)
    ids = client.enqueue_batch(queue, [{"ms": 1000}] * 10)
    worker = spawn(queue, CONCURRENCY=1, PREFETCH=4)
    def running() -> int:
        return sum(s.running for s in client.stats() if s.queue == queue)

    def first_started() -> list[int]:
        return [i for i in ids if started(db, i, worker.pid)]

    eventually(lambda: running() == 5 and len(first_started()) == 1,
               what="1 running and 4 prefetched, the first one's handler started")
    first = first_started()[0]
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    assert status(client, first) is leaseq.JobStatus.SUCCEEDED
    handed = [i for i in ids if outcomes(client, i) == [leaseq.AttemptOutcome.HANDED_BACK]]
    assert len(handed) == 4, [outcomes(client, i) for i in ids]
    for i in handed:
        job = client.job(i)
        assert (job.status, job.attempts) == (leaseq.JobStatus.PENDING, 0), "no attempt spent"
        assert not started(db, i, worker.pid), "a handed-back job never ran"
    untouched = set(ids) - set(handed) - {first}
    assert all(outcomes(client, i) == [] for i in untouched)


def test_never_more_than_concurrency_handlers_at_once(
    spawn: Callable[..., subprocess.Popen[str]], db: psycopg.Connection[Any], client: leaseq.Client
) -> None:
    queue = new_queue(client)
    ids = client.enqueue_batch(queue, [{"ms": 150}] * 12)
    worker = spawn(queue, CONCURRENCY=3)
    eventually(
        lambda: all(status(client, i) is leaseq.JobStatus.SUCCEEDED for i in ids), what="all done"
    )
    worker.send_signal(signal.SIGTERM)
    events = db.execute(
        "SELECT event FROM conformance_log WHERE job_id = ANY(%s) ORDER BY at, event DESC",
        (ids,),
    ).fetchall()
    running = peak = 0
    for (event,) in events:
        running += 1 if event == "start" else -1
        peak = max(peak, running)
    assert 1 < peak <= 3, peak


def test_a_committed_enqueue_wakes_an_idle_worker_within_100_ms(
    spawn: Callable[..., subprocess.Popen[str]], db: psycopg.Connection[Any], client: leaseq.Client
) -> None:
    queue = new_queue(client)
    worker = spawn(queue, POLL_MS=600000)
    time.sleep(1.5)  # connected, listening, idle: its poll ten minutes away
    job_id = client.enqueue(queue, {})
    eventually(lambda: status(client, job_id) is leaseq.JobStatus.SUCCEEDED, seconds=5)
    worker.send_signal(signal.SIGTERM)
    row = db.execute(
        """SELECT extract(epoch FROM a.started_at - j.created_at) * 1000
             FROM leaseq.attempts a JOIN leaseq.jobs j ON j.id = a.job_id
            WHERE a.job_id = %s""",
        (job_id,),
    ).fetchone()
    assert row is not None and float(row[0]) < 100, f"claimed {row} ms after its commit"


def test_outcomes_retry_die_and_snooze_as_documented(
    spawn: Callable[..., subprocess.Popen[str]], client: leaseq.Client
) -> None:
    queue = new_queue(client, backoff_base=timedelta(hours=1), backoff_cap=timedelta(hours=1))
    failing = client.enqueue(queue, {"do": "throw"})
    dying = client.enqueue(queue, {"do": "dead"})
    snoozing = client.enqueue(queue, {"do": "snooze"})
    worker = spawn(queue)
    eventually(
        lambda: all(len(client.attempts(i)) == 1 and status(client, i) is not leaseq.JobStatus.RUNNING
                    for i in (failing, dying, snoozing)),
        what="three decisions",
    )
    worker.send_signal(signal.SIGTERM)
    failed = client.job(failing)
    assert (failed.status, failed.attempts) == (leaseq.JobStatus.PENDING, 1)
    assert failed.run_at > failed.updated_at, "retried after the backoff"
    assert client.job(dying).status is leaseq.JobStatus.DEAD
    snoozed = client.job(snoozing)
    assert (snoozed.status, snoozed.attempts, snoozed.snoozes) == (leaseq.JobStatus.PENDING, 0, 1)


def test_a_poison_outcome_fails_only_its_own_job_dead_with_the_reason(
    spawn: Callable[..., subprocess.Popen[str]], db: psycopg.Connection[Any], client: leaseq.Client
) -> None:
    queue = new_queue(client)
    ids = client.enqueue_batch(queue, [{"do": "poison"}] + [{"ms": 50}] * 4)
    worker = spawn(queue, CONCURRENCY=5)
    eventually(lambda: all(status(client, i) in (leaseq.JobStatus.SUCCEEDED, leaseq.JobStatus.DEAD)
                           for i in ids), what="every job final")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    assert [status(client, i) for i in ids] == [leaseq.JobStatus.DEAD] + [leaseq.JobStatus.SUCCEEDED] * 4
    row = db.execute(
        "SELECT last_error->>'error', last_error->>'outcome', last_error->>'sqlstate', attempts"
        "  FROM leaseq.jobs WHERE id = %s", (ids[0],)
    ).fetchone()
    assert row == ("outcome_refused", "complete", "54000", 1), row


def test_the_grace_bounds_the_process_and_an_ignoring_handler_is_abandoned_to_its_lease(
    spawn: Callable[..., subprocess.Popen[str]], db: psycopg.Connection[Any], client: leaseq.Client
) -> None:
    """A handler that ignores every stop (a sync sleep, a timer, a future that never looks at its
    token): the process still ends within the grace and a few seconds — status 0, or 143 where
    only ending the process stops it (Node) — and the job is left to its lease, never finished."""
    queue = new_queue(client, lease=timedelta(seconds=2), backoff_base=timedelta(milliseconds=100))
    job_id = client.enqueue(queue, {"ms": 60_000})
    worker = spawn(queue, GRACE_MS=500)
    eventually(lambda: started(db, job_id, worker.pid), what="the job started")
    worker.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    code = worker.wait(timeout=10)
    took = time.monotonic() - signalled
    assert code in (0, 128 + signal.SIGTERM), code
    assert took < 4, f"ended {took:.1f} s after SIGTERM, for a grace of 0.5 s"
    assert status(client, job_id) is leaseq.JobStatus.RUNNING, "left to its lease, not finished"
    eventually(lambda: len(client.claim(queue, "probe")) == 1, seconds=10,
               what="claimed again once its lease ran out")
    assert outcomes(client, job_id)[0] is leaseq.AttemptOutcome.LEASE_EXPIRED


def test_a_second_signal_ends_the_process_at_once(
    spawn: Callable[..., subprocess.Popen[str]], db: psycopg.Connection[Any], client: leaseq.Client
) -> None:
    queue = new_queue(client)
    job_id = client.enqueue(queue, {"ms": 60_000})
    worker = spawn(queue, GRACE_MS=600_000)
    eventually(lambda: started(db, job_id, worker.pid), what="the job started")
    worker.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert worker.poll() is None, "the first signal drains (grace 10 min)"
    worker.send_signal(signal.SIGINT)
    # 130, or killed by the signal itself (Python re-raises it with its default action).
    assert worker.wait(timeout=3) in (128 + signal.SIGINT, -signal.SIGINT)


def test_transactional_handlers_at_full_concurrency_never_starve_the_heartbeat(
    spawn: Callable[..., subprocess.Popen[str]], db: psycopg.Connection[Any], client: leaseq.Client
) -> None:
    """Sixteen transactional handlers, each holding its transaction two and a half leases long:
    the renewals still go out — every job succeeds at its first attempt, its effect once."""
    queue = new_queue(client, lease=timedelta(seconds=1), backoff_base=timedelta(milliseconds=100))
    ids = client.enqueue_batch(queue, [{"ms": 2500}] * 16)
    worker = spawn(queue, TRANSACTIONAL=1, CONCURRENCY=16)
    eventually(lambda: all(status(client, i) is not leaseq.JobStatus.RUNNING
                           and status(client, i) is not leaseq.JobStatus.PENDING for i in ids),
               seconds=30, what="every job final")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    assert [outcomes(client, i) for i in ids] == [[leaseq.AttemptOutcome.SUCCEEDED]] * 16
    assert all(effects(db, i) == [worker.pid] for i in ids)


def test_a_worker_cut_off_mid_job_gives_it_up_and_another_completes_it_once(
    spawn: Callable[..., subprocess.Popen[str]], db: psycopg.Connection[Any], client: leaseq.Client,
    url: str,
) -> None:
    """Through the shared proxy: a worker whose connections go silent mid-job (a partition: no
    error, no answer) gives the job up by its lease's end; another worker takes it over and
    completes it, its effect written once; healed, the first never finishes it."""
    queue = new_queue(client, lease=timedelta(seconds=2), backoff_base=timedelta(milliseconds=100))
    job_id = client.enqueue(queue, {"ms": 3000})
    with Partition(url) as partition:
        cut_off = spawn(queue, database_url=partition.url, TRANSACTIONAL=1)
        eventually(lambda: started(db, job_id, cut_off.pid), what="the job started")
        partition.silence()
        other = spawn(queue, TRANSACTIONAL=1)
        eventually(lambda: status(client, job_id) is leaseq.JobStatus.SUCCEEDED, seconds=30,
                   what="taken over and completed")
        partition.heal()
        time.sleep(1.0)  # the first's handler has ended: nothing of it may land
        cut_off.send_signal(signal.SIGTERM)
        other.send_signal(signal.SIGTERM)
        cut_off.wait(timeout=30)
        assert other.wait(timeout=20) == 0
    assert outcomes(client, job_id) == [
        leaseq.AttemptOutcome.LEASE_EXPIRED,
        leaseq.AttemptOutcome.SUCCEEDED,
    ]
    assert effects(db, job_id) == [other.pid], "the effect once, by the worker that completed"
    assert client.job(job_id).result == f'{{"pid": {other.pid}}}'


def test_an_enqueue_rolls_back_with_its_transaction(
    spawn: Callable[..., subprocess.Popen[str]], client: leaseq.Client
) -> None:
    queue = new_queue(client)
    producer = spawn(queue, MODE="enqueue")
    _, stderr = producer.communicate(timeout=20)
    assert producer.returncode == 0, stderr
    jobs = client.jobs(queue)
    assert [client.job(j.job_id).payload for j in jobs] == ['{"committed": true}']


def test_a_producer_only_role_enqueues_but_its_worker_is_refused_with_42501(
    spawn: Callable[..., subprocess.Popen[str]], db: psycopg.Connection[Any], client: leaseq.Client,
    url: str,
) -> None:
    queue = new_queue(client)
    role = f"conf_producer_{os.getpid()}"
    db.execute(f"DROP ROLE IF EXISTS {role}")
    db.execute(f"CREATE ROLE {role} LOGIN IN ROLE leaseq_producer")
    # A URL (the Node client's pg reads URLs, not libpq's key=value strings).
    parts = urllib.parse.urlsplit(url)
    as_role = parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}").geturl()
    try:
        with leaseq.Client(as_role) as producer:
            producer.enqueue(queue, {})
        worker = spawn(queue, database_url=as_role)
        _, stderr = worker.communicate(timeout=20)
        assert worker.returncode == 1, stderr
        assert "permission denied for function queue_claim" in stderr and "42501" in stderr, stderr
    finally:
        db.execute(f"DROP ROLE {role}")
    assert [j.status for j in client.jobs(queue)] == [leaseq.JobStatus.PENDING]


def test_chaos_2000_jobs_through_kills_and_pauses_lose_nothing_and_write_each_effect_once(
    spawn: Callable[..., subprocess.Popen[str]], db: psycopg.Connection[Any], client: leaseq.Client
) -> None:
    """Three transactional workers of one client, `kill -9`ed and SIGSTOPped past their 1 s
    leases at random (seed printed) while they work 2,000 jobs: every job succeeds, each effect
    row is written exactly once, by the attempt that succeeded."""
    seed = int(os.environ.get("LEASEQ_CONFORMANCE_SEED", time.time_ns() % 2**31))
    print(f"conformance chaos seed {seed}")
    rng = random.Random(seed)
    queue = new_queue(
        client,
        lease=timedelta(seconds=1),
        max_attempts=1000,
        backoff_base=timedelta(milliseconds=50),
        backoff_cap=timedelta(milliseconds=500),
    )
    ids = client.enqueue_batch(queue, [{"ms": 5}] * 2000)
    settings = {"TRANSACTIONAL": 1, "CONCURRENCY": 8, "GRACE_MS": 2000}
    workers = [spawn(queue, **settings) for _ in range(3)]
    kills = pauses = 0
    deadline = time.monotonic() + 120
    done = 0
    while done < len(ids):
        assert time.monotonic() < deadline, f"{done} of {len(ids)} done after 120 s (seed {seed})"
        time.sleep(rng.uniform(0.3, 1.0))
        victim = rng.randrange(len(workers))
        if rng.random() < 0.5:
            workers[victim].kill()
            workers[victim].wait()
            workers[victim] = spawn(queue, **settings)
            kills += 1
        else:
            workers[victim].send_signal(signal.SIGSTOP)
            time.sleep(rng.uniform(1.2, 2.0))  # past its lease
            workers[victim].send_signal(signal.SIGCONT)
            pauses += 1
        row = db.execute(
            "SELECT count(*) FROM leaseq.jobs WHERE queue = %s AND status = 'succeeded'", (queue,)
        ).fetchone()
        done = int(row[0]) if row else 0
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        worker.wait(timeout=30)
    assert kills + pauses > 0
    counted = db.execute(
        """SELECT count(*) FILTER (WHERE j.status = 'succeeded'),
                  (SELECT count(*) FROM conformance_effects e WHERE e.job_id = ANY(%(ids)s)),
                  (SELECT count(DISTINCT e.job_id) FROM conformance_effects e
                    WHERE e.job_id = ANY(%(ids)s)),
                  (SELECT count(*) FROM conformance_effects e
                     JOIN leaseq.attempts a ON a.job_id = e.job_id AND a.attempt_no = e.attempt
                    WHERE e.job_id = ANY(%(ids)s) AND a.outcome = 'succeeded')
             FROM leaseq.jobs j WHERE j.id = ANY(%(ids)s)""",
        {"ids": ids},
    ).fetchone()
    assert counted == (2000, 2000, 2000, 2000), (
        f"succeeded, effects, jobs with effects, effects by the succeeding attempt: {counted} "
        f"(seed {seed}, {kills} kills, {pauses} pauses)"
    )
