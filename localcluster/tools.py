"""Where the external programs live: ZooKeeper and BookKeeper jars, toxiproxy, java.

`make setup` (scripts/setup.sh) installs them; this module only finds them and says how to
get them when they are missing. Flags > environment (GLOBELOG_CACHE) > defaults.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from core.errors import ClusterError

REPO_ROOT = Path(__file__).resolve().parents[1]
BOOKKEEPER_VERSION = "4.17.3"
# Pinned past the releases that lose committed transactions when a follower's sync with a new
# leader is cut off (scripts/zookeeper-jars.pom.xml says which).
ZOOKEEPER_VERSION = "3.9.5"


@dataclass(frozen=True, slots=True)
class Tools:
    java: str
    zookeeper_classpath: str
    bookkeeper_classpath: str
    toxiproxy: str


def cache_dir() -> Path:
    return Path(os.environ.get("GLOBELOG_CACHE", REPO_ROOT / ".cache"))


def find_tools() -> Tools:
    """Finds every tool or raises ClusterError naming each missing one and the fix."""
    missing: list[str] = []
    java = shutil.which("java")
    if java is None:
        missing.append("java: not on PATH (install a JDK 17)")
    zookeeper = cache_dir() / f"zookeeper-{ZOOKEEPER_VERSION}" / "jars"
    if not (zookeeper / f"zookeeper-{ZOOKEEPER_VERSION}.jar").is_file():
        missing.append(f"{zookeeper}: ZooKeeper {ZOOKEEPER_VERSION} jars missing")
    jars = cache_dir() / f"bookkeeper-{BOOKKEEPER_VERSION}" / "jars"
    if not (jars / f"bookkeeper-server-{BOOKKEEPER_VERSION}.jar").is_file():
        missing.append(f"{jars}: BookKeeper {BOOKKEEPER_VERSION} jars missing")
    toxiproxy = cache_dir() / "bin" / "toxiproxy-server"
    if not toxiproxy.is_file():
        missing.append(f"{toxiproxy}: missing")
    if missing:
        listed = "; ".join(missing)
        raise ClusterError(f"cluster tools not installed: {listed}. Run `make setup` first.")
    assert java is not None
    return Tools(java, f"{zookeeper}/*", f"{jars}/*", str(toxiproxy))
