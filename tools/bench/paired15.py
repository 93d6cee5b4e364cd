"""Reads tools/bench/paired15.sh's runs (argument: its OUT) and prints, per Worker of section 15,
the median of the per-round ratios after/before (logging at INFO; under OpenTelemetry's SDK),
their range, and the client CPU per job."""

import glob
import json
import re
import statistics
import sys

ROWS = ["Rust (library Worker)", "Rust, prefetch 500 (batch 250)",
        "Python (leaseq.Worker, asyncio)", "Python, prefetch 500 (batch 250)",
        "Node (Worker)", "Node, prefetch 500 (batch 250)"]


def load(out: str, kind: str) -> dict[int, dict[str, tuple[float, float]]]:
    runs = {}
    for path in glob.glob(f"{out}/{kind}-*/results.json"):
        sections = json.load(open(path))
        section = next(v for v in sections.values() if isinstance(v, dict) and ROWS[0] in v)
        runs[int(re.search(r"-(\d+)/results", path).group(1))] = {
            row: (section[row]["jobs_per_s"], section[row]["client_cpu_us_per_job"]) for row in ROWS
        }
    return runs


out = sys.argv[1]
base = load(out, "base")
for kind, what in (("log", "logging at INFO"), ("otel", "OpenTelemetry's SDK")):
    after = load(out, kind)
    rounds = sorted(set(base) & set(after))
    print(f"\n{what} / before, {len(rounds)} paired rounds")
    for row in ROWS:
        ratios = [after[r][row][0] / base[r][row][0] for r in rounds]
        cpu = [statistics.median(runs[r][row][1] for r in rounds) for runs in (base, after)]
        print(f"{row:<36} {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
              f"   CPU µs/job {cpu[0]:.1f} -> {cpu[1]:.1f}")
