#!/usr/bin/env bash
# Section 15 before and after, paired: tools/bench/paired15.sh BASE ROUNDS OUT
#   BASE    a worktree of the baseline commit with its leaseq-bench built
#           (CARGO_TARGET_DIR=BASE/target cargo build --release -p leaseq-tools --bin leaseq-bench)
#           and its Node client built (npm run build in BASE/clients/node)
#   ROUNDS  rounds; each runs `leaseq-bench --only 15 --repeat 1` three times, the order
#           rotated: the baseline, this tree with LEASEQ_BENCH_LOG=INFO, this tree with
#           LEASEQ_BENCH_OTEL=1; 100,000 jobs a drain, as scripts/bench runs it (QUICK=1: 20,000,
#           as its --quick, where the start-up of a JIT-compiled SDK weighs five times as much)
#   OUT     where each run's results go (OUT/{base,log,otel}-N/results.json)
# Against DATABASE_URL (the database scripts/bench makes: leaseq_bench, this tree's extension).
# Then: python3 tools/bench/paired15.py OUT
set -euo pipefail
base=$(realpath "$1") rounds=$2 out=$(realpath -m "$3")
quick=${QUICK:+--quick}
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
run() {
    local kind=$1 r=$2
    case $kind in
        base) (cd "$base" && PYTHONPATH="$base/clients/python/src" \
                LEASEQ_BENCH_PYTHON="$here/target/py/bin/python" \
                target/release/leaseq-bench $quick --only 15 --repeat 1 --out "$out/$kind-$r") ;;
        log) (cd "$here" && LEASEQ_BENCH_LOG=INFO \
                target/release/leaseq-bench $quick --only 15 --repeat 1 --out "$out/$kind-$r") ;;
        otel) (cd "$here" && LEASEQ_BENCH_OTEL=1 \
                target/release/leaseq-bench $quick --only 15 --repeat 1 --out "$out/$kind-$r") ;;
    esac >"$out/$kind-$r.out" 2>"$out/$kind-$r.err"
}
for r in $(seq 1 "$rounds"); do
    case $((r % 3)) in
        0) order="base log otel" ;; 1) order="log otel base" ;; *) order="otel base log" ;;
    esac
    for kind in $order; do run "$kind" "$r"; done
    echo "round $r of $rounds done" >&2
done
