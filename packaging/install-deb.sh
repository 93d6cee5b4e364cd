#!/usr/bin/env bash
# Installs one of leaseq's .deb packages the way a user does, and proves it installed whole:
#   packaging/install-deb.sh FILE.deb
# apt-get resolves the package's Depends (postgresql-NN for the extension) and refuses when they
# cannot be met; then dpkg --verify checks every installed file against the package's md5sums.
# scripts/package --test and the Dockerfile both run it, so the image is installed as CI installs.
set -euo pipefail

deb=${1:?usage: install-deb.sh FILE.deb}
[ -f "$deb" ] || { echo "install-deb.sh: no such file: $deb" >&2; exit 1; }
package=$(dpkg-deb --field "$deb" Package)
version=$(dpkg-deb --field "$deb" Version)
# apt-get reads a local file only when it is given as a path (./x.deb), never as a bare name.
case "$deb" in /* | ./*) ;; *) deb=./$deb ;; esac

DEBIAN_FRONTEND=noninteractive DEBCONF_NOWARNINGS=yes apt-get install -y -qq --no-install-recommends "$deb" >/dev/null

installed=$(dpkg-query -W -f='${db:Status-Abbrev}${Version}' "$package")
if [ "$installed" != "ii $version" ]; then
    echo "install-deb.sh: $package is '$installed' after the install, not 'ii $version'" >&2
    exit 1
fi
# dpkg --verify prints one line per file that differs from the package (and its exit status
# says nothing on older dpkg): any output is a failure.
problems=$(dpkg --verify "$package" 2>&1)
if [ -n "$problems" ]; then
    printf 'install-deb.sh: installed files of %s differ from the package:\n%s\n' "$package" "$problems" >&2
    exit 1
fi
echo "installed $package $version ($(dpkg-query -L "$package" | grep -c -v '/$') paths)"
