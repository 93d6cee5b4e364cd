#!/usr/bin/env bash
# Each leaseq Worker's drain alone, before and after, paired: tools/bench/paired_drain.sh BASE ROUNDS OUT
#   BASE    a worktree of the baseline commit with its Node client built (npm run build in
#           BASE/clients/node); its Rust Worker is built here (tools/bench/rust-drain.rs against
#           its client), its Python client taken from BASE/clients/python/src
#   ROUNDS  rounds; each drains, for every row (ROWS, default all six: rust rust-prefetch python
#           python-prefetch node node-prefetch), the baseline, this tree with LEASEQ_BENCH_LOG=INFO
#           and this tree with LEASEQ_BENCH_OTEL=1 (OpenTelemetry's SDK, spans exported to
#           nowhere), the order rotated
#   OUT     where the drains go: OUT/drains.tsv, a line each, then the summary
# Against DATABASE_URL (the database scripts/bench makes: leaseq_bench, this tree's extension).
# Unlike section 15 (tools/bench/paired15.sh), each drain starts alike: JOBS (100,000) no-op
# jobs enqueued, then VACUUM ANALYZE and a CHECKPOINT, so that no drain pays for the previous
# one's dead rows or WAL. The rate is on the server's clock, first claim to last finish.
set -euo pipefail
base=$(realpath "$1") rounds=$2 out=$(realpath -m "$3")
here=$(cd "$(dirname "$0")/../.." && pwd)
: "${DATABASE_URL:?the benchmark database}"
jobs=${JOBS:-100000}
rows=${ROWS:-rust rust-prefetch python python-prefetch node node-prefetch}
mkdir -p "$out"
sql() { psql -qAtX -v ON_ERROR_STOP=1 -d "$DATABASE_URL" -c "$1"; }

# The Rust drain program, built against BASE's client and this tree's (with its `otel` feature).
build_rust() {
    local tree=$1 dir=$here/target/rust-drain/$2 sdk=$3
    mkdir -p "$dir/src"
    cp "$here/tools/bench/rust-drain.rs" "$dir/src/main.rs"
    cp "$here/Cargo.lock" "$dir/Cargo.lock"
    # `sdk` needs the client's feature `otel`, which a baseline may not have; `quiet` is the
    # baseline's `WorkerConfig::quiet` (trouble only), as section 15 ran it.
    local features='sdk = []
quiet = []'
    [ -z "$sdk" ] || features='sdk = ["leaseq-client/otel", "dep:opentelemetry", "dep:opentelemetry_sdk"]
quiet = []

[dependencies.opentelemetry]
version = "0.33"
default-features = false
features = ["trace"]
optional = true

[dependencies.opentelemetry_sdk]
version = "0.33"
default-features = false
features = ["trace"]
optional = true'
    cat >"$dir/Cargo.toml" <<TOML
[workspace]

[package]
name = "rust-drain"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
leaseq-client = { path = "$tree/client" }
libc = "0.2"
tokio = { version = "1", features = ["rt"] }
tracing-subscriber = { version = "0.3", default-features = false, features = ["fmt", "std"] }

[features]
$features
TOML
    cargo build --release --quiet --manifest-path "$dir/Cargo.toml" --features "${sdk:-quiet}"
}
build_rust "$base" base ""
build_rust "$here" here sdk

drain() {
    local row=$1 kind=$2 program settings=() env=() tree=here
    case $row in
        *-prefetch) settings=(PREFETCH=500 BATCH=250) ;;
    esac
    case $kind in
        base) env=(PYTHONPATH="$base/clients/python/src"
                   LEASEQ_BENCH_NODE_CLIENT="$base/clients/node/dist/esm/index.js") tree=base ;;
        log) env=(LEASEQ_BENCH_LOG=INFO) ;;
        otel) env=(LEASEQ_BENCH_OTEL=1) ;;
    esac
    case $row in
        rust*) program=("$here/target/rust-drain/$tree/target/release/rust-drain") ;;
        python*) program=("$here/target/py/bin/python" "$here/tools/bench/drain.py") ;;
        node*) program=(node "$here/tools/bench/drain.mjs") ;;
    esac
    sql "TRUNCATE leaseq.jobs CASCADE" >/dev/null
    for _ in $(seq 1 $((jobs / 10000))); do
        sql "SELECT count(*) FROM leaseq.queue_enqueue_batch('bench',
                 array(SELECT '{}'::jsonb FROM generate_series(1, 10000)))" >/dev/null
    done
    sql "VACUUM ANALYZE leaseq.jobs" && sql "CHECKPOINT"
    local said
    said=$(env "${env[@]}" "${settings[@]}" CONCURRENCY=16 JOBS="$jobs" "${program[@]}" 2>>"$out/stderr")
    local rate
    rate=$(sql "SELECT count(*) / extract(epoch FROM max(finished_at) - min(started_at))
                  FROM leaseq.jobs WHERE queue = 'bench' AND status = 'succeeded'
                HAVING count(*) = $jobs")
    [ -n "$rate" ] || { echo "$row $kind: not every job succeeded ($said)" >&2; exit 1; }
    local cpu
    cpu=$(python3 -c "import json, sys; print(json.loads(sys.argv[1])['cpu_seconds'] * 1e6 / $jobs)" "$said")
    printf '%s\t%s\t%s\t%.0f\t%.1f\n' "$r" "$row" "$kind" "$rate" "$cpu" >>"$out/drains.tsv"
}
for r in $(seq 1 "$rounds"); do
    case $((r % 3)) in
        0) order="base log otel" ;; 1) order="log otel base" ;; *) order="otel base log" ;;
    esac
    for row in $rows; do
        for kind in $order; do drain "$row" "$kind"; done
    done
    echo "round $r of $rounds done" >&2
done
python3 - "$out/drains.tsv" <<'PY'
import collections, statistics, sys
rates, cpus = collections.defaultdict(dict), collections.defaultdict(list)
for line in open(sys.argv[1]):
    r, row, kind, rate, cpu = line.split("\t")
    rates[row, r][kind] = float(rate)
    cpus[row, kind].append(float(cpu))
print(f"{'row':<16} {'INFO / before':>22} {'SDK / before':>22}   CPU µs/job before, INFO, SDK")
for row in dict.fromkeys(k[0] for k in rates):
    rounds = [v for (w, _), v in rates.items() if w == row and len(v) == 3]
    cells = []
    for kind in ("log", "otel"):
        ratios = [v[kind] / v["base"] for v in rounds]
        cells.append(f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f})")
    cpu = ", ".join(f"{statistics.median(cpus[row, k]):.1f}" for k in ("base", "log", "otel"))
    print(f"{row:<16} {cells[0]:>22} {cells[1]:>22}   {cpu}   ({len(rounds)} rounds)")
PY
