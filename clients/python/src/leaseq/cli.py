"""`leaseq-py work --queue Q module:function`: runs a Python handler as a Worker, until SIGTERM or
SIGINT (then drains: running handlers get `--grace` seconds, the rest is left to its lease)."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from datetime import timedelta
from typing import Any

import psycopg

from .errors import LeaseqError
from .worker import Worker


def _handler(spec: str) -> Any:
    module, _, name = spec.partition(":")
    if not module or not name:
        raise SystemExit(f"leaseq-py: the handler must be module:function, not {spec!r}")
    sys.path.insert(0, os.getcwd())
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as missing:
        raise SystemExit(f"leaseq-py: cannot load the handler {spec!r}: {missing}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="leaseq-py", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    work = commands.add_parser("work", help="run a handler for a queue's jobs")
    work.add_argument("handler", help="module:function, called with each leaseq.Job")
    work.add_argument("--queue", required=True)
    work.add_argument("--database-url", default=os.environ.get("DATABASE_URL"))
    work.add_argument("--concurrency", type=int, default=10)
    work.add_argument("--batch", type=int, default=None)
    work.add_argument("--prefetch", type=int, default=0,
                      help="jobs claimed beyond the free slots; handed back unstarted on SIGTERM")
    work.add_argument("--lease", type=float, default=None, help="seconds (default: the queue's)")
    work.add_argument("--grace", type=float, default=30.0, help="seconds to drain on SIGTERM")
    work.add_argument("--transactional", action="store_true",
                      help="call handler(job, conn) inside the completion's transaction")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="leaseq-py: %(message)s")
    if not args.database_url:
        parser.error("set --database-url or DATABASE_URL")
    try:
        worker = Worker(
            args.database_url,
            queue=args.queue,
            handler=_handler(args.handler),
            concurrency=args.concurrency,
            batch=args.batch,
            prefetch=args.prefetch,
            lease=None if args.lease is None else timedelta(seconds=args.lease),
            grace=args.grace,
            transactional=args.transactional,
        )
    except ValueError as bad:  # a setting out of range: a usage error, exit 2
        parser.error(str(bad))
    try:
        summary = worker.run()
    except (LeaseqError, psycopg.Error) as refused:
        print(f"leaseq-py: {refused}", file=sys.stderr)
        return 1
    print(f"leaseq-py: stopped: {summary}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
