"""`leaseq-py work` as a process: SIGTERM drains a running job and exits 0; a worker killed with
SIGKILL mid-job costs one lease, then another worker completes the job — once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

import leaseq

HANDLER = '''
import pathlib, time

def slow(job):
    marker = pathlib.Path({dir!r}) / f"started-{{job.id}}"
    marker.write_text(str(job.attempt))
    time.sleep(job.payload["seconds"])
    return {{"slept": job.payload["seconds"]}}
'''


def worker(url: str, queue: str, directory: Path, *extra: str) -> subprocess.Popen[str]:
    (directory / "handlers_for_test.py").write_text(HANDLER.format(dir=str(directory)))
    return subprocess.Popen(
        [sys.executable, "-m", "leaseq.cli", "work", "--queue", queue, *extra,
         "handlers_for_test:slow"],
        cwd=directory,
        env={**os.environ, "DATABASE_URL": url},
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(path: Path, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_sigterm_drains_the_running_job_and_exits_0(
    url: str, client: leaseq.Client, queue: str, tmp_path: Path
) -> None:
    job_id = client.enqueue(queue, {"seconds": 0.5})
    process = worker(url, queue, tmp_path)
    wait_for(tmp_path / f"started-{job_id}")
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0, stderr
    assert "completed=1" in stderr
    assert client.job(job_id).status is leaseq.JobStatus.SUCCEEDED


def test_a_killed_worker_costs_one_lease_and_the_job_completes_once(
    url: str, conn: psycopg.Connection[Any], client: leaseq.Client, queue: str, tmp_path: Path
) -> None:
    client.queue_create(queue, lease=timedelta(seconds=1))
    job_id = client.enqueue(queue, {"seconds": 0.2})
    (tmp_path / "first").mkdir()
    first = worker(url, queue, tmp_path / "first")
    wait_for(tmp_path / "first" / f"started-{job_id}")
    first.kill()
    first.wait(timeout=10)
    assert client.job(job_id).status is leaseq.JobStatus.RUNNING
    (tmp_path / "second").mkdir()
    second = worker(url, queue, tmp_path / "second")
    deadline = time.monotonic() + 20
    while client.job(job_id).status is not leaseq.JobStatus.SUCCEEDED:
        assert time.monotonic() < deadline, "never completed"
        time.sleep(0.05)
    second.send_signal(signal.SIGTERM)
    second.communicate(timeout=20)
    outcomes = [(a.attempt_no, a.outcome) for a in client.attempts(job_id)]
    assert outcomes == [
        (1, leaseq.AttemptOutcome.LEASE_EXPIRED),
        (2, leaseq.AttemptOutcome.SUCCEEDED),
    ]
    assert (tmp_path / "second" / f"started-{job_id}").read_text() == "2"


def test_a_bad_handler_or_setting_is_a_one_line_error_not_a_traceback(tmp_path: Path) -> None:
    for extra, said in (
        (["no_such_module:f"], "cannot load the handler 'no_such_module:f': No module named"),
        (["--prefetch", "-1", "os:getcwd"], "prefetch must be between 0 and 10000"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "leaseq.cli", "work", "--queue", "q", *extra],
            cwd=tmp_path,
            env={**os.environ, "DATABASE_URL": "postgresql://127.0.0.1:1/x"},
            capture_output=True,
            text=True,
        )
        assert done.returncode in (1, 2), done
        assert said in done.stderr and "Traceback" not in done.stderr, done.stderr
