"""How a Worker runs and stops: sync handlers on `concurrency` threads of its own, async callables
of any shape awaited, `stop()` at any time, `run()` from any thread, `grace` a bound on the
process, and a second signal that exits at once."""

from __future__ import annotations

import functools
import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

import leaseq
from conftest import run_bounded, statuses


def test_sync_handlers_run_concurrency_at_once_whatever_the_cpus(
    url: str, client: leaseq.Client, queue: str
) -> None:
    client.enqueue_batch(queue, [{} for _ in range(32)])
    lock = threading.Lock()
    running = peak = 0

    def handler(job: leaseq.Job) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.5)
        with lock:
            running -= 1

    # The default executor would give min(32, CPUs + 4) threads: 6 on this machine's 2 CPUs.
    summary = run_bounded(leaseq.Worker(url, queue=queue, handler=handler, concurrency=16))
    assert summary.completed == 32
    assert peak == 16, f"{peak} handlers at once, not 16"


def wrapped(handler: Callable[[leaseq.Job], Awaitable[Any]]) -> Callable[[leaseq.Job], Any]:
    """A decorator as users write them: `functools.wraps` over an `async def`, itself sync."""

    @functools.wraps(handler)
    def call(job: leaseq.Job) -> Any:
        return handler(job)

    return call


class AsyncCallable:
    async def __call__(self, job: leaseq.Job) -> Any:
        return {"ran": "object", "id": job.id}


def test_async_callables_of_any_shape_are_awaited(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    async def body(job: leaseq.Job) -> Any:
        return {"ran": "wrapped", "id": job.id}

    for handler, ran in ((wrapped(body), "wrapped"), (AsyncCallable(), "object"),
                         (functools.partial(body), "wrapped")):
        job_id = client.enqueue(queue, {})
        summary = run_bounded(leaseq.Worker(url, queue=queue, handler=handler))
        assert summary.completed == 1, (ran, summary)
        assert json.loads(client.job(job_id).result or "") == {"ran": ran, "id": job_id}


def test_stop_before_run_makes_run_return_at_once_claiming_nothing(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    client.enqueue_batch(queue, [{} for _ in range(5)])
    worker = leaseq.Worker(url, queue=queue, handler=lambda job: None)
    worker.stop()
    started = time.monotonic()
    summaries: list[leaseq.Summary] = []
    thread = threading.Thread(target=lambda: summaries.append(worker.run()), daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "run() after stop() kept working"
    assert time.monotonic() - started < 5
    assert summaries[0].completed == 0
    assert statuses(conn, queue) == {"pending": 5}
    # The stop was for that run: the next one works.
    assert run_bounded(worker).completed == 5


def test_run_works_from_a_thread_other_than_the_main_one(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    client.enqueue_batch(queue, [{} for _ in range(3)])
    done = threading.Event()
    worker = leaseq.Worker(url, queue=queue, handler=lambda job: done.set(), poll=0.1)
    failures: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as error:
            failures.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert done.wait(20), "no job ran"
    worker.stop()
    thread.join(20)
    assert failures == [] and not thread.is_alive()
    assert statuses(conn, queue) == {"succeeded": 3}


#: A worker process: SIGTERM or SIGINT it. Its handlers, sync or async by `argv[2]`, never end
#: (well, not for 60 s); `argv[3]` is `grace`.
PROGRAM = textwrap.dedent(
    """
    import asyncio, sys, time
    import leaseq

    def started():
        sys.stdout.write("started\\n")  # one write: the two handlers' lines never mix
        sys.stdout.flush()

    def stuck(job):
        started()
        time.sleep(60)

    async def stuck_async(job):
        started()
        while True:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                pass  # a handler that swallows its cancellation

    handler = stuck if sys.argv[2] == "sync" else stuck_async
    worker = leaseq.Worker(sys.argv[1], queue=sys.argv[4], handler=handler,
                           grace=float(sys.argv[3]), concurrency=2)
    summary = worker.run()
    print("summary", summary.abandoned, summary.completed, flush=True)
    """
)


def start_worker(url: str, queue: str, kind: str, grace: float) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, url, kind, str(grace), queue],
        stdout=subprocess.PIPE, text=True,
    )
    assert process.stdout is not None
    for _ in range(2):
        assert process.stdout.readline().strip() == "started"
    return process


def test_grace_bounds_the_process_and_abandoned_jobs_are_counted(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    for kind in ("sync", "async"):
        client.enqueue_batch(queue, [{} for _ in range(2)])
        process = start_worker(url, queue, kind, grace=1.0)
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=30)
        took = time.monotonic() - sent
        assert process.returncode == 0, (kind, out)
        assert took < 6, f"{kind}: exited {took:.1f} s after SIGTERM with grace 1 s"
        assert "summary 2 0" in out, (kind, out)
        # Left to their leases: still running on the server, never finished by the worker.
        assert statuses(conn, queue).get("running") == 2, kind
        conn.execute("SELECT leaseq.queue_cancel(id) FROM leaseq.jobs WHERE queue = %s "
                     "AND status = 'running'", (queue,))


def test_a_second_signal_exits_at_once(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    for first, second in ((signal.SIGTERM, signal.SIGINT), (signal.SIGINT, signal.SIGINT)):
        client.enqueue_batch(queue, [{} for _ in range(2)])
        process = start_worker(url, queue, "sync", grace=60.0)
        process.send_signal(first)
        time.sleep(0.5)
        assert process.poll() is None, "still in its grace"
        sent = time.monotonic()
        process.send_signal(second)
        process.communicate(timeout=30)
        assert time.monotonic() - sent < 3, "the second signal did not exit at once"
        assert process.returncode != 0
        conn.execute("SELECT leaseq.queue_cancel(id) FROM leaseq.jobs WHERE queue = %s "
                     "AND status = 'running'", (queue,))
