#!/usr/bin/env bash
# globelog's one set-up step: installs everything `make demo` and `make test` need, idempotently.
#   - Debian packages: iproute2 (the multi-host test), chromium and chromium-driver (the
#     console's browser tests)
#   - Apache ZooKeeper server jars (pinned) resolved by Maven into .cache/
#   - Apache BookKeeper server jars (pinned) resolved by Maven into .cache/
#   - Apache DistributedLog's library (the same release) into .cache/, for `bench dl`
#   - toxiproxy (pinned) built with `go install` into .cache/bin
#   - a Python venv (.venv) with globelog installed editable and its dev dependencies
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${GLOBELOG_CACHE:-$ROOT/.cache}"
BOOKKEEPER_VERSION=4.17.3
ZOOKEEPER_VERSION=3.9.5
TOXIPROXY_VERSION=v2.12.0
PYTHON="${PYTHON:-python3}"

say() { printf '[setup] %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    say "need root for: $*"; exit 1; fi
}

debian_packages() {
  local packages="iproute2 chromium chromium-driver"
  if command -v ip >/dev/null && [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    return
  fi
  say "installing Debian packages: $packages"
  export DEBIAN_FRONTEND=noninteractive
  # shellcheck disable=SC2086 # one word per package
  as_root apt-get install -y -q $packages >/dev/null 2>&1 || {
    as_root apt-get update -q >/dev/null
    # shellcheck disable=SC2086
    as_root apt-get install -y -q $packages >/dev/null
  }
}

maven_jars() {
  # maven_jars NAME VERSION POM PROPERTY: the POM's dependencies at VERSION (given as -DPROPERTY)
  # resolved by Maven into $CACHE/NAME-VERSION/jars, once
  local name=$1 version=$2 pom=$3 property=$4
  local dir="$CACHE/$name-$version"
  if [ -f "$dir/.complete" ]; then return; fi
  say "resolving $name $version jars with Maven into $dir"
  rm -rf "$dir/jars"
  mkdir -p "$dir"
  mvn -q -B -Dstyle.color=never -f "$ROOT/scripts/$pom" -D"$property=$version" \
    dependency:copy-dependencies -DoutputDirectory="$dir/jars"
  touch "$dir/.complete"
}

toxiproxy() {
  local bin="$CACHE/bin/toxiproxy-server"
  if [ -x "$bin" ] && [ -f "$CACHE/bin/.toxiproxy-$TOXIPROXY_VERSION" ]; then return; fi
  say "building toxiproxy $TOXIPROXY_VERSION with go install"
  mkdir -p "$CACHE/bin" "$CACHE/go"
  GOBIN="$CACHE/go/bin" GOFLAGS=-mod=mod go install \
    "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION"
  cp "$CACHE/go/bin/server" "$bin"
  touch "$CACHE/bin/.toxiproxy-$TOXIPROXY_VERSION"
}

python_venv() {
  # The stamp holds the hash of the pyproject.toml installed: an editable install maps each
  # package by name, so a new package (or dependency) needs a new install, whatever the mtimes.
  local stamp="$ROOT/.venv/.globelog-installed" wanted
  wanted=$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)
  if [ -x "$ROOT/.venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$wanted" ]; then return; fi
  say "creating the Python venv (.venv) and installing globelog[dev,spark] (PySpark builds locally: a few minutes)"
  [ -x "$ROOT/.venv/bin/python" ] || "$PYTHON" -m venv "$ROOT/.venv"
  "$ROOT/.venv/bin/python" -m pip install -q --upgrade pip
  "$ROOT/.venv/bin/python" -m pip install -q -e "$ROOT[dev,spark]"
  echo "$wanted" >"$stamp"
}

debian_packages
maven_jars zookeeper "$ZOOKEEPER_VERSION" zookeeper-jars.pom.xml zookeeper.version
maven_jars bookkeeper "$BOOKKEEPER_VERSION" bookkeeper-jars.pom.xml bookkeeper.version
# DistributedLog's Java library, for `globelog bench dl` (kept apart from the bookies' jars)
maven_jars distributedlog "$BOOKKEEPER_VERSION" distributedlog-jars.pom.xml distributedlog.version
toxiproxy
python_venv
say "ready"
