"""Hosts on one machine: a network namespace per host, joined by a bridge in a namespace of its own.

The test creates every namespace it uses and deletes them all at the end. Addresses come from
198.18.0.0/24 (reserved for network tests) and exist only inside those namespaces: the
machine's own namespace gets no interface, address or route of the test network, so no
packet of the test leaves the namespaces. Host names resolve through a hosts file that
`ip netns exec` mounts over /etc/hosts inside each namespace (/etc/netns/NS/hosts), with an
empty resolv.conf so that nothing asks a DNS server.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

NETWORK = "198.18.0"  # /24
FIRST_HOST = 10
NETNS_ETC = Path("/etc/netns")


class NetnsUnavailableError(RuntimeError):
    """This machine (or this user) cannot create network namespaces."""


@dataclass
class Host:
    name: str  # short name, e.g. "zk1"
    namespace: str
    address: str
    hostnames: tuple[str, ...]


@dataclass
class Network:
    """A set of namespaced hosts; use as a context manager so everything goes at the end."""

    prefix: str = field(default_factory=lambda: f"gl{os.getpid() % 100000}")
    workdir: Path = Path("/")  # every process's working directory (not a source checkout)
    hosts: dict[str, Host] = field(default_factory=dict)
    processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    _switch: str | None = None

    def __enter__(self) -> Network:
        check_netns_available()
        self._switch = f"{self.prefix}-switch"
        _ip("netns", "add", self._switch)
        _ip("-n", self._switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self._switch, "link", "set", "br0", "up")
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_host(self, name: str, hostnames: tuple[str, ...]) -> Host:
        assert self._switch is not None, "enter the Network first"
        index = len(self.hosts)
        namespace = f"{self.prefix}-{name}"
        address = f"{NETWORK}.{FIRST_HOST + index}"
        _ip("netns", "add", namespace)
        host = Host(name, namespace, address, hostnames)
        self.hosts[name] = host
        peer = f"p{index}"
        # The pair is made inside the host's namespace, its peer moved straight to the switch:
        # neither end ever exists in the machine's own namespace.
        _ip("-n", namespace, "link", "add", "eth0", "type", "veth", "peer", "name", peer,
            "netns", self._switch)  # fmt: skip
        _ip("-n", self._switch, "link", "set", peer, "master", "br0")
        _ip("-n", self._switch, "link", "set", peer, "up")
        _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", namespace, "link", "set", "eth0", "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        return host

    def write_hosts_files(self) -> None:
        """Every namespace resolves every host's names (call after the last add_host)."""
        lines = ["127.0.0.1 localhost"]
        lines += [f"{h.address} {' '.join(h.hostnames)}" for h in self.hosts.values()]
        for host in self.hosts.values():
            etc = NETNS_ETC / host.namespace
            etc.mkdir(parents=True, exist_ok=True)
            (etc / "hosts").write_text("\n".join(lines) + "\n")
            (etc / "resolv.conf").write_text("# no DNS server inside the test network\n")

    def argv(self, host: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.hosts[host].namespace, *argv]

    def start(self, host: str, argv: list[str], log: Path, env: dict[str, str]) -> None:
        """Starts a long-running process on `host`; it is ended (by its pid) at close."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            proc = subprocess.Popen(
                self.argv(host, argv), stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, start_new_session=True, cwd=self.workdir,
            )  # fmt: skip
        self.processes.append((host, proc))

    def run(
        self, host: str, argv: list[str], env: dict[str, str], timeout_s: float = 120,
        stdin: bytes | None = None,
    ) -> subprocess.CompletedProcess[bytes]:  # fmt: skip
        return subprocess.run(
            self.argv(host, argv), input=stdin, capture_output=True, env=env, timeout=timeout_s,
            check=False, cwd=self.workdir,
        )  # fmt: skip

    def exited(self, expected: frozenset[str] = frozenset()) -> list[str]:
        """Processes that ended, except those of the `expected` hosts."""
        return [
            f"{host}: pid {p.pid} (exit {p.returncode})"
            for host, p in self.processes
            if host not in expected and p.poll() is not None
        ]

    def kill_host(self, host: str) -> list[int]:
        """kill -9 of every process started on `host` (a host lost at once); their pids."""
        killed = []
        for name, proc in self.processes:
            if name == host and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
                killed.append(proc.pid)
        return killed

    def close(self) -> None:
        for _, proc in self.processes:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for _, proc in self.processes:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for host in self.hosts.values():
            _ip("netns", "del", host.namespace, check=False)
            shutil.rmtree(NETNS_ETC / host.namespace, ignore_errors=True)
        if self._switch is not None:
            _ip("netns", "del", self._switch, check=False)
        self.hosts.clear()
        self._switch = None


def check_netns_available() -> None:
    """Raises NetnsUnavailableError saying why namespaces cannot be made here."""
    if shutil.which("ip") is None:
        raise NetnsUnavailableError(
            "the multi-host test needs iproute2's `ip` (Debian package iproute2); it is not on PATH"
        )
    probe = f"glprobe{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, check=False)
    if made.returncode != 0:
        raise NetnsUnavailableError(
            "the multi-host test runs each host in a network namespace and cannot create one "
            f"here (`ip netns add` exited {made.returncode}: "
            f"{made.stderr.decode(errors='replace').strip()}); it needs root or CAP_SYS_ADMIN "
            "and CAP_NET_ADMIN"
        )
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)


def _ip(*args: str, check: bool = True) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(
            f"ip {' '.join(args)}: exit {done.returncode}: "
            f"{done.stderr.decode(errors='replace').strip()}"
        )
