#!/usr/bin/env bash
# Download (here, where apt works) the Debian packages of the C libraries gate links against,
# runtime + -dev, into .deb/ (git-ignored). The offline GPU host receives them with the source
# tree and ci/gpu-check.sh unpacks them with dpkg -x into a private prefix; nothing is installed.
# Usage: ci/fetch-debs.sh [--with-criterion]
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(libyaml-0-2 libyaml-dev libsqlite3-0 libsqlite3-dev libsodium23 libsodium-dev
      libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libpcre2-dev
      libutf8proc2 libutf8proc-dev libjansson4 libjansson-dev zlib1g zlib1g-dev
      pkgconf pkgconf-bin libpkgconf3)
if [ "${1:-}" = "--with-criterion" ]; then
    # Criterion and its whole runtime closure (apt-cache depends --recurse libcriterion3, less
    # libc6 / libgcc-s1 / gcc-12-base): the suite stage's test binaries load them from the prefix;
    # libffi-dev and libgit2-dev for the .pc files criterion.pc requires (pkg-config --exists
    # criterion fails without them)
    pkgs+=(libcriterion3 libcriterion-dev libboxfort-dev libnanomsg5 libnanomsg-dev libgit2-1.5
           libffi-dev libgit2-dev
           libprotobuf-c1 libffi8 libhttp-parser2.9 libmbedcrypto7 libmbedtls14 libmbedx509-1
           libssh2-1 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1
           libcom-err2 libssl3)
fi
mkdir -p .deb
cd .deb
apt-get download "${pkgs[@]}"
# What the packages need from the GPU host: the highest libc6 version any of them depends on
# (ci/gpu-check.sh's preflight compares it with the host's glibc and stops early when older).
need=$(for d in *.deb; do dpkg-deb -f "$d" Depends; done | tr ',' '\n' |
    sed -n 's/^ *libc6 (>= \([0-9.]*\)).*/\1/p' | sort -V | tail -n1)
{
    echo "glibc_min=${need:-0}"
    echo "fetched_on=$(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(getconf GNU_LIBC_VERSION | awk '{print $2}')"
} >MANIFEST
cat MANIFEST
ls -1 *.deb | wc -l | xargs echo "ci/fetch-debs.sh: .deb/ holds these many packages:"
