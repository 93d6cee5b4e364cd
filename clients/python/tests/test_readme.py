"""The README's quickstart is a program that works: examples/quickstart.py (the README shows it
word for word: examples/check_readme.py holds the two together), run as a user runs it, against
the test database."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

QUICKSTART = Path(__file__).parent.parent / "examples" / "quickstart.py"


def test_the_quickstart_commits_an_order_with_its_job_and_its_worker_completes_it(
    url: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    # From an empty directory, as a script: what it imports comes from the installed package.
    ran = subprocess.run(
        [sys.executable, str(QUICKSTART)],
        cwd=tmp_path,
        env={**os.environ, "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    said = re.search(r"^job (\d+): succeeded, result (.*)$", ran.stdout, re.MULTILINE)
    assert said is not None, ran.stdout
    job_id = int(said.group(1))
    row = conn.execute(
        "SELECT queue, status::text, payload->>'order', result->>'sent_to' FROM leaseq.jobs "
        "WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None, f"job {job_id} is not in the database"
    queue, status, order, sent_to = row
    assert (queue, status, sent_to) == ("emails", "succeeded", "ada@example.com")
    business = conn.execute("SELECT email FROM orders WHERE id = %s::uuid", (order,)).fetchall()
    assert business == [("ada@example.com",)], "the order committed with its job"
