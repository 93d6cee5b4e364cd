"""leaseq-bench section 15: PgQueuer (asyncpg driver), the Python PostgreSQL queue with the
highest throughput we could install from the registry, drains the same no-op jobs in one process
(`mode=drain`: it returns once the queue is empty), dequeuing BATCH jobs at a time with at most
IN_FLIGHT picked at once (0: no cap). It prints what it did: seconds from its first job to its
return, and its CPU time."""

import asyncio
import json
import os
import resource
import time

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.domain.types import QueueExecutionMode
from pgqueuer.models import Job
from pgqueuer.queries import Queries


async def main() -> None:
    url = os.environ["DATABASE_URL"]
    jobs = int(os.environ.get("JOBS", "20000"))
    setup = await asyncpg.connect(url)
    queries = Queries(AsyncpgDriver(setup))
    if not await setup.fetchval("SELECT to_regclass('pgqueuer') IS NOT NULL"):
        await queries.install()
    await setup.execute("TRUNCATE pgqueuer")
    for start in range(0, jobs, 10_000):
        n = min(10_000, jobs - start)
        await queries.enqueue(["noop"] * n, [None] * n, [0] * n)
    await setup.close()

    pgq = PgQueuer(AsyncpgDriver(await asyncpg.connect(url)))
    done = 0
    first: float | None = None

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        nonlocal done, first
        first = first or time.perf_counter()
        done += 1

    before = resource.getrusage(resource.RUSAGE_SELF)
    await pgq.qm.run(
        mode=QueueExecutionMode.drain,
        batch_size=int(os.environ.get("BATCH", "10")),
        max_concurrent_tasks=int(os.environ.get("IN_FLIGHT", "0")) or None,
    )
    seconds = time.perf_counter() - (first or time.perf_counter())
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    print(json.dumps({"completed": done, "seconds": seconds, "cpu_seconds": cpu}))


asyncio.run(main())
