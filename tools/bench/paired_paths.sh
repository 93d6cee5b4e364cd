#!/usr/bin/env bash
# Issue 40, point 5: the other paths of this tree against a baseline release, paired:
#   tools/bench/paired_paths.sh BASE_PKG ROUNDS OUT [SECTIONS]
#   BASE_PKG  the baseline's package for PostgreSQL 15 (`cargo pgrx package` in a worktree of
#             the release: its target/release/leaseq-pg15)
#   ROUNDS    rounds; each installs the baseline's library and this tree's in turn (the order
#             alternating each round), restarts the private cluster, makes a fresh leaseq_bench and
#             runs this tree's `leaseq-bench --only SECTIONS` (default 11,13,14,17,18, full size;
#             QUICK=1 for the quick profile) against it
#   OUT       OUT/{base,this}-N/results.json; then `python3 tools/bench/paired_paths.py OUT`
# This tree's package is made first (scripts/package's build: `cargo pgrx package`). Leaves this
# tree's library installed.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
base=$(realpath "$1") rounds=$2 out=$(realpath -m "$3") sections=${4:-11,13,14,17,18}
quick=${QUICK:+--quick}
# shellcheck source=scripts/lib.sh
source "$here/scripts/lib.sh"
use_major 15
cd "$here"
cargo pgrx package --pg-config "$PG_CONFIG" >/dev/null
this=$here/target/release/leaseq-pg15
mkdir -p "$out"
# The cluster preloads the library: it is stopped before the file under it changes.
install_package() {
    stop_cluster
    cp -r "$1"/usr/. /usr/
    start_cluster
}
run() {
    local kind=$1 r=$2 package
    if [ "$kind" = base ]; then package=$base; else package=$this; fi
    install_package "$package"
    fresh_database leaseq_bench
    DATABASE_URL="postgres://$PGUSER@$PGHOST:$PGPORT/leaseq_bench" \
        target/release/leaseq-bench $quick --only "$sections" --out "$out/$kind-$r" \
        >"$out/$kind-$r.out" 2>"$out/$kind-$r.err"
}
for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) = 1 ]; then order="base this"; else order="this base"; fi
    for kind in $order; do
        echo "round $r: $kind" >&2
        run "$kind" "$r"
    done
done
install_package "$this"
