"""Summary of tools/bench/paired_paths.sh: per measured point, this tree against the baseline in
each round, and the median of the rounds. Rates (`jobs_per_s`) as this / base, times (`*_ms`,
`*_us`) as base / this: above 1 is better either way. WAL per job as this / base (below 1 is
less). Usage: python3 tools/bench/paired_paths.py OUT"""

import json
import os
import statistics
import sys


def leaves(node, path=()):
    """(path, number) for every number in a results.json, lists of runs left out."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, path + (key,))
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield path, float(node)


def ratio(path, this, base):
    """The point's ratio, better above 1, or None for a leaf that is not a measure."""
    key = path[-1]
    if this <= 0 or base <= 0:
        return None
    if key == "jobs_per_s":
        return this / base
    if key.endswith("_ms") or key.endswith("_us"):
        return base / this
    if key == "wal_bytes_per_job":
        return this / base
    return None


def main(out):
    def done(kind, r):
        return os.path.exists(os.path.join(out, f"{kind}-{r}", "results.json"))

    # Rounds with both runs finished (a stopped run leaves its directory).
    names = [d for d in os.listdir(out) if d.startswith("base-") and "." not in d]
    rounds = sorted(r for r in {int(d.split("-")[1]) for d in names} if done("base", r) and done("this", r))
    per_point = {}
    for r in rounds:
        runs = []
        for kind in ("base", "this"):
            with open(os.path.join(out, f"{kind}-{r}", "results.json")) as f:
                runs.append(dict(leaves(json.load(f))))
        base, this = runs
        for path, value in this.items():
            if path in base:
                got = ratio(path, value, base[path])
                if got is not None:
                    per_point.setdefault(path, []).append(got)
    print(f"{'point':<100} {'median':>7}  rounds")
    for path, ratios in per_point.items():
        label = " / ".join(path)
        print(f"{label:<100} {statistics.median(ratios):>6.3f}×  {' '.join(f'{x:.2f}' for x in ratios)}")


if __name__ == "__main__":
    main(sys.argv[1])
