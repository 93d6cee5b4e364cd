"""The Workers of this process, counted for Prometheus: `leaseq_worker_jobs_total{queue,
outcome}` — what their runs' `Summary` counts (completed, failed, dead, snoozed, lost, fenced,
handed_back, abandoned), summed by queue — and `leaseq_worker_handlers{queue}`, the handlers
running now. With `prometheus_client` installed (`pip install "leaseq[prometheus]"`):

    prometheus_client.REGISTRY.register(leaseq.metrics.WorkerCollector())

The server's own view, of every queue and every worker, is `Client.metrics()`.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .worker import Worker

#: Every Worker made in this process, while it lives.
_workers: weakref.WeakSet[Worker] = weakref.WeakSet()


def track(worker: Worker) -> None:
    _workers.add(worker)


class WorkerCollector:
    """A `prometheus_client` collector of this process's Workers (see the module)."""

    def __init__(self) -> None:
        try:
            from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        except ImportError as missing:
            raise ImportError(
                'leaseq.metrics needs prometheus_client: pip install "leaseq[prometheus]"'
            ) from missing
        self._counter, self._gauge = CounterMetricFamily, GaugeMetricFamily

    def collect(self) -> Iterator[Any]:
        jobs = self._counter(
            "leaseq_worker_jobs",
            "Jobs this process's leaseq Workers finished or let go, by queue and outcome.",
            labels=["queue", "outcome"],
        )
        handlers = self._gauge(
            "leaseq_worker_handlers",
            "Handlers this process's leaseq Workers are running now, by queue.",
            labels=["queue"],
        )
        totals: dict[tuple[str, str], int] = {}
        running: dict[str, int] = {}
        for worker in list(_workers):
            for name, value in dataclasses.asdict(worker.summary).items():
                totals[(worker.queue, name)] = totals.get((worker.queue, name), 0) + value
            running[worker.queue] = running.get(worker.queue, 0) + worker.handlers_running
        for (queue, outcome), value in sorted(totals.items()):
            jobs.add_metric([queue, outcome], value)
        for queue, value in sorted(running.items()):
            handlers.add_metric([queue], value)
        yield jobs
        yield handlers
