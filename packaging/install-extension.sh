#!/bin/sh
# Installs leaseq @VERSION@ for PostgreSQL @MAJOR@ into the server that PG_CONFIG describes
# (default: the pg_config on PATH), for servers not installed from Debian's packages:
#   sudo ./install.sh [PG_CONFIG]
# lib/leaseq.so goes to `pg_config --pkglibdir`; extension/ (leaseq.control, the install script
# of every release and every upgrade script) to `pg_config --sharedir`/extension.
# Then: restart the server if it preloads leaseq (shared_preload_libraries), and run
# CREATE EXTENSION leaseq (new databases) or ALTER EXTENSION leaseq UPDATE (existing ones).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
pg_config=${1:-pg_config}
version=$("$pg_config" --version) || { echo "install.sh: cannot run $pg_config" >&2; exit 1; }
# A library built for another major fails to load ("incompatible library"): refuse it here.
major=$(echo "$version" | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
if [ "$major" != @MAJOR@ ]; then
    echo "install.sh: this is leaseq for PostgreSQL @MAJOR@, but $pg_config is $version" >&2
    exit 1
fi
libdir=$("$pg_config" --pkglibdir)
extdir=$("$pg_config" --sharedir)/extension
install -d "$libdir" "$extdir"
# install writes a new file in place of the old one: a running server keeps the library it
# loaded until it restarts, rather than crashing on a file rewritten under it.
install -m 755 "$here/lib/leaseq.so" "$libdir/leaseq.so"
install -m 644 "$here"/extension/* "$extdir/"
echo "leaseq @VERSION@ installed for $version: $libdir/leaseq.so, $extdir/leaseq.control and its scripts"
