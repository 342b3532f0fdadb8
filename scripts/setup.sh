#!/usr/bin/env bash
# globelog's one set-up step: installs everything `make demo` and `make test` need, idempotently.
#   - Debian packages: zookeeper (server jars), libslf4j-java, iproute2 (the multi-host test),
#     chromium and chromium-driver (the console's browser tests)
#   - Apache BookKeeper server jars (pinned) resolved by Maven into .cache/
#   - Apache DistributedLog's library (the same release) into .cache/, for `bench dl`
#   - toxiproxy (pinned) built with `go install` into .cache/bin
#   - a Python venv (.venv) with globelog installed editable and its dev dependencies
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${GLOBELOG_CACHE:-$ROOT/.cache}"
BOOKKEEPER_VERSION=4.17.3
TOXIPROXY_VERSION=v2.12.0
PYTHON="${PYTHON:-python3}"

say() { printf '[setup] %s\n' "$*"; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    say "need root for: $*"; exit 1; fi
}

debian_packages() {
  local packages="zookeeper libslf4j-java iproute2 chromium chromium-driver"
  if [ -f /usr/share/java/zookeeper.jar ] && [ -f /usr/share/java/slf4j-simple.jar ] &&
    command -v ip >/dev/null && [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
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

bookkeeper_jars() {
  local dir="$CACHE/bookkeeper-$BOOKKEEPER_VERSION"
  if [ -f "$dir/.complete" ]; then return; fi
  say "resolving BookKeeper $BOOKKEEPER_VERSION jars with Maven into $dir"
  rm -rf "$dir/jars"
  mkdir -p "$dir"
  mvn -q -B -Dstyle.color=never -f "$ROOT/scripts/bookkeeper-jars.pom.xml" \
    -Dbookkeeper.version="$BOOKKEEPER_VERSION" \
    dependency:copy-dependencies -DoutputDirectory="$dir/jars"
  touch "$dir/.complete"
}

distributedlog_jars() {
  # DistributedLog's Java library, for `globelog bench dl` (kept apart from the bookies' jars)
  local dir="$CACHE/distributedlog-$BOOKKEEPER_VERSION"
  if [ -f "$dir/.complete" ]; then return; fi
  say "resolving DistributedLog $BOOKKEEPER_VERSION jars with Maven into $dir"
  rm -rf "$dir/jars"
  mkdir -p "$dir"
  mvn -q -B -Dstyle.color=never -f "$ROOT/scripts/distributedlog-jars.pom.xml" \
    -Ddistributedlog.version="$BOOKKEEPER_VERSION" \
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
bookkeeper_jars
distributedlog_jars
toxiproxy
python_venv
say "ready"
