"""leaseq in five minutes: an order and the job that emails its confirmation, committed in one
transaction, then a Worker that runs the job. DATABASE_URL: a database with leaseq installed."""

import logging
import os
import uuid

import psycopg

import leaseq

url = os.environ["DATABASE_URL"]
logging.basicConfig(level=logging.INFO)  # the Worker's own lines: it started, it stopped


def send_confirmation(job: leaseq.Job) -> dict[str, str]:
    """The handler: what it returns is the job's result; an exception fails the attempt."""
    print(f"emailing {job.payload['email']} about order {job.payload['order']}")
    return {"sent_to": job.payload["email"]}


with leaseq.Client(url) as client:
    client.queue_create("emails", max_attempts=5)  # creates the queue, or updates its settings

# Your row and its job in one transaction: both are committed, or neither is.
with psycopg.connect(url) as conn:
    conn.execute("CREATE TABLE IF NOT EXISTS orders (id uuid PRIMARY KEY, email text NOT NULL)")
    order = uuid.uuid4()
    conn.execute("INSERT INTO orders (id, email) VALUES (%s, %s)", (order, "ada@example.com"))
    job_id = leaseq.enqueue(conn, "emails", {"order": str(order), "email": "ada@example.com"})
# Leaving the block committed the transaction: now the job can be claimed.

# Runs due jobs until none is left; a service calls run(), which works until SIGTERM.
leaseq.Worker(url, queue="emails", handler=send_confirmation).run_until_idle()

with leaseq.Client(url) as client:
    job = client.job(job_id)
    print(f"job {job_id}: {job.status.value}, result {job.result}")
