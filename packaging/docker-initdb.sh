#!/usr/bin/env bash
# The postgres image's entrypoint runs this once, when it initialises an empty data directory,
# against its temporary server: leaseq is created in $POSTGRES_DB. With LEASEQ_PRELOAD=1 the
# library is also preloaded from the first real start on (postgresql.conf: the metrics' counters,
# and the maintenance worker for $POSTGRES_DB); see the Dockerfile.
set -euo pipefail

psql=(psql -X -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}")
"${psql[@]}" -q -c 'CREATE EXTENSION IF NOT EXISTS leaseq'
echo "leaseq $("${psql[@]}" -A -t -c "SELECT extversion FROM pg_extension WHERE extname = 'leaseq'") in database ${POSTGRES_DB:-postgres}"

if [ "${LEASEQ_PRELOAD:-0}" = 1 ]; then
    preload=$("${psql[@]}" -A -t -c 'SHOW shared_preload_libraries')
    case ",${preload// /}," in
        *,leaseq,* | ,,) ;;
        *)
            echo "LEASEQ_PRELOAD=1, but shared_preload_libraries is already '$preload':" \
                "start the server with -c shared_preload_libraries='$preload,leaseq' instead" >&2
            exit 1
            ;;
    esac
    # Into the configuration file, not by ALTER SYSTEM: ALTER SYSTEM refuses a parameter the
    # server does not know yet (PostgreSQL 15 does), and leaseq.maintenance_databases is known
    # only once the library is preloaded, which this temporary server does not do.
    db=${POSTGRES_DB:-postgres}
    config=$("${psql[@]}" -A -t -c 'SHOW config_file')
    {
        echo
        echo "# LEASEQ_PRELOAD=1 (leaseq's init script, docker-entrypoint-initdb.d/50-leaseq.sh)"
        [ -n "$preload" ] || echo "shared_preload_libraries = 'leaseq'"
        echo "leaseq.maintenance_databases = '${db//\'/\'\'}'"
    } >>"$config"
    echo "leaseq preloaded from the next start, its maintenance worker in $db ($config)"
fi
