"""leaseq-bench section 15: the Python Worker (asyncio, a no-op async handler) drains the queue
`bench` with CONCURRENCY slots (PREFETCH jobs held beyond them, claims of BATCH, when given) until
nothing is due, then prints what it did and its CPU time."""

import json
import os
import resource

import leaseq


async def noop(job: leaseq.Job) -> None:
    return None


worker = leaseq.Worker(
    os.environ["DATABASE_URL"],
    queue="bench",
    handler=noop,
    concurrency=int(os.environ.get("CONCURRENCY", "16")),
    prefetch=int(os.environ.get("PREFETCH", "0")),
    batch=int(os.environ["BATCH"]) if "BATCH" in os.environ else None,
)
summary = worker.run_until_idle()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"completed": summary.completed, "cpu_seconds": usage.ru_utime + usage.ru_stime}))
