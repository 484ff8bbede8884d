#!/usr/bin/env bash
# Installs every package gate needs to build and test, with apt-get.
# Idempotent: when everything is present it prints nothing and exits 0.
set -euo pipefail
pkgs=(build-essential cmake pkg-config git
      libyaml-dev libsqlite3-dev sqlite3 libcriterion-dev libsodium-dev
      libpcre2-dev libutf8proc-dev libjansson-dev
      clang clang-format libclang-rt-14-dev python3 ninja-build zlib1g-dev
      chromium fonts-dejavu-core)  # headless Chromium renders `gate report` (test_html_report)
pkgs+=(libxml2-utils) # xmllint: JUnit XML validated against tests/data/junit.xsd
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
