# PostgreSQL with leaseq, from the official postgres image and leaseq's own Debian package.
#
# Build (the .deb comes from target/package/; Docker is not needed to make it):
#   scripts/package --major 17 && docker build --build-arg PG_MAJOR=17 -t leaseq:17 .
# PG_MAJOR is any of 15, 16, 17, 18 that scripts/package built.
#
# Run:
#   docker run -d -e POSTGRES_PASSWORD=secret -e POSTGRES_DB=app -p 5432:5432 leaseq:17
# On its first start (an empty data directory) the image's entrypoint creates the extension in
# POSTGRES_DB (packaging/docker-initdb.sh). With -e LEASEQ_PRELOAD=1 it also writes
# shared_preload_libraries = 'leaseq' and leaseq.maintenance_databases = POSTGRES_DB into the
# server's postgresql.conf, so that the metrics' counters and the maintenance worker run from the
# first real start on; like every init script of the image, it acts on a new data directory only
# (and refuses when shared_preload_libraries already names another library: then pass the list
# yourself). Without it, preload on any start with:
#   docker run … leaseq:17 -c shared_preload_libraries=leaseq -c leaseq.maintenance_databases=app
ARG PG_MAJOR=17
FROM postgres:${PG_MAJOR}-bookworm
ARG PG_MAJOR

# The package is installed by the same script CI installs it with (scripts/package --test):
# apt-get resolves Depends: postgresql-${PG_MAJOR}, the image's own server, then every installed
# file is verified against the package.
COPY target/package/postgresql-${PG_MAJOR}-leaseq_*_amd64.deb /tmp/leaseq/
COPY packaging/install-deb.sh /usr/local/lib/leaseq/install-deb.sh
RUN /usr/local/lib/leaseq/install-deb.sh /tmp/leaseq/postgresql-${PG_MAJOR}-leaseq_*_amd64.deb \
    && rm -rf /tmp/leaseq

COPY packaging/docker-initdb.sh /docker-entrypoint-initdb.d/50-leaseq.sh
