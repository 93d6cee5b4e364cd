"""A poison outcome — a result or error JSON cannot encode, one larger than the server takes, one
the server refuses — fails only its own job: dead, the reason recorded as its error, while the
rest of the round completes and the Worker goes on."""

from __future__ import annotations

import decimal
import importlib.util
import json
import os
import sys
from datetime import datetime
from typing import Any

import psycopg

import leaseq
from conftest import run_bounded, statuses


def circular() -> dict[str, Any]:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    return loop


#: What each poison job's handler does, by the `poison` key of its payload.
POISONS: dict[str, Any] = {
    "datetime": lambda: datetime(2026, 1, 1),
    "decimal": lambda: decimal.Decimal("1.5"),
    "set": lambda: {1, 2},
    "circular": circular,
    # Encodes, but jsonb refuses it (SQLSTATE 22P05): a refusal the server makes.
    "nul": lambda: "a\u0000b",
    # Larger than leaseq.max_payload_bytes (1 MiB by default): 54000.
    "oversized": lambda: "x" * (2 * 1024 * 1024),
}


def test_a_poison_result_fails_only_its_own_job_and_the_worker_goes_on(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    good = client.enqueue_batch(queue, [{"n": n} for n in range(20)])
    poisoned = {name: client.enqueue(queue, {"poison": name}) for name in POISONS}

    def handler(job: leaseq.Job) -> Any:
        name = job.payload.get("poison")
        return POISONS[name]() if name else {"n": job.payload["n"]}

    summary = run_bounded(leaseq.Worker(url, queue=queue, handler=handler, concurrency=8))
    assert statuses(conn, queue) == {"succeeded": 20, "dead": len(POISONS)}
    assert summary.completed == 20 and summary.dead == len(POISONS) and summary.lost == 0
    for job_id in good:
        assert client.job(job_id).result is not None
    for name, job_id in poisoned.items():
        dead = client.job(job_id)
        assert dead.status is leaseq.JobStatus.DEAD, name
        assert dead.last_error is not None, name
        error = json.loads(dead.last_error)
        assert error["error"] == "outcome_refused", (name, error)
        assert error["outcome"] == "complete", (name, error)
        assert error["message"], (name, error)
    assert "not JSON serializable" in json.loads(client.job(poisoned["datetime"]).last_error or "")["message"]
    oversized = json.loads(client.job(poisoned["oversized"]).last_error or "")
    assert oversized["sqlstate"] == "54000", oversized


def test_a_poison_error_document_fails_only_its_own_job(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    client.enqueue_batch(queue, [{"n": n} for n in range(10)])
    bad_dead = client.enqueue(queue, {"do": "dead"})
    huge_failure = client.enqueue(queue, {"do": "raise"})

    def handler(job: leaseq.Job) -> Any:
        match job.payload.get("do"):
            case "dead":
                raise leaseq.Dead({"when": datetime(2026, 1, 1)})
            case "raise":
                raise RuntimeError("y" * (2 * 1024 * 1024))
        return None

    summary = run_bounded(leaseq.Worker(url, queue=queue, handler=handler, concurrency=4))
    assert summary.completed == 10 and summary.lost == 0
    dead = client.job(bad_dead)
    assert dead.status is leaseq.JobStatus.DEAD
    assert json.loads(dead.last_error or "")["outcome"] == "dead"
    # A failure whose document the server refuses is still a failure: retried by the queue's
    # policy, the reason in place of the document.
    failed = client.job(huge_failure)
    assert failed.status is leaseq.JobStatus.PENDING and failed.attempts == 1
    error = json.loads(failed.last_error or "")
    assert error["error"] == "outcome_refused" and error["sqlstate"] == "54000", error
    assert statuses(conn, queue) == {"succeeded": 10, "dead": 1, "pending": 1}


def test_a_transactional_poison_result_rolls_back_and_goes_dead_with_the_reason(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str
) -> None:
    effects = f"{queue}_effects"
    conn.execute(f"CREATE TABLE {effects} (job_id bigint PRIMARY KEY)")
    fine = client.enqueue_batch(queue, [{"n": n} for n in range(4)])
    unencodable = client.enqueue(queue, {"poison": "datetime"})
    oversized = client.enqueue(queue, {"poison": "oversized"})

    def handler(job: leaseq.Job, tx: psycopg.Connection[Any]) -> Any:
        tx.execute(f"INSERT INTO {effects} VALUES (%s)", (job.id,))
        name = job.payload.get("poison")
        return POISONS[name]() if name else None

    summary = run_bounded(
        leaseq.Worker(url, queue=queue, handler=handler, concurrency=3, transactional=True)
    )
    assert (summary.completed, summary.dead, summary.lost) == (4, 2, 0)
    written = sorted(row[0] for row in conn.execute(f"SELECT job_id FROM {effects}").fetchall())
    assert written == fine, "the poison jobs' writes rolled back"
    for job_id, sqlstate in ((unencodable, None), (oversized, "54000")):
        dead = client.job(job_id)
        assert dead.status is leaseq.JobStatus.DEAD
        error = json.loads(dead.last_error or "")
        assert (error["error"], error["outcome"], error.get("sqlstate")) == (
            "outcome_refused", "complete", sqlstate)
    conn.execute(f"DROP TABLE {effects}")


def test_dead_and_snooze_from_another_copy_of_the_module_are_recognised(
    url: str, client: leaseq.Client, queue: str
) -> None:
    # A second copy of the package (two installs, a reload): its classes are not ours.
    package = os.path.dirname(leaseq.__file__)
    spec = importlib.util.spec_from_file_location(
        "leaseq_copy", os.path.join(package, "__init__.py"), submodule_search_locations=[package]
    )
    assert spec is not None and spec.loader is not None
    copy = importlib.util.module_from_spec(spec)
    sys.modules["leaseq_copy"] = copy
    try:
        spec.loader.exec_module(copy)
        assert copy.Dead is not leaseq.Dead
        dying = client.enqueue(queue, {"do": "dead"})
        snoozing = client.enqueue(queue, {"do": "snooze"})

        def handler(job: leaseq.Job) -> None:
            if job.payload["do"] == "dead":
                raise copy.Dead({"error": "from the copy"})
            raise copy.Snooze(3600)

        summary = run_bounded(leaseq.Worker(url, queue=queue, handler=handler))
        assert (summary.dead, summary.snoozed, summary.failed) == (1, 1, 0)
        assert client.job(dying).last_error == '{"error": "from the copy"}'
        assert client.job(snoozing).snoozes == 1
    finally:
        for name in [n for n in sys.modules if n == "leaseq_copy" or n.startswith("leaseq_copy.")]:
            del sys.modules[name]
