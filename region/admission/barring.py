"""Client addresses barred in the kernel for a moment: their new connections are not accepted.

An address that opens connections past its rate (region/admission/accepts.py) has the one at
hand held and reset; and for about a second after (the hold, `refusal_hold_s`) the kernel
drops the address's connection requests (SYNs) before the proxy sees them. A classic BPF
program on each listening socket (Linux's SO_ATTACH_FILTER) compares the packet's source
address with the barred ones. The proxy spends nothing on such a connection, not even the
accept and the reset; the client's TCP retries its SYN (after 1 s, then 3 s, 7 s, ...) and is
served once the bar has lapsed and its bucket has tokens again. So a flood of connections from
one address costs the proxy about a burst of accepts every few seconds instead of one accept
and one reset for each.

The connections the address already has open are served on, and a connection accepted has the
program it inherits from its listening socket taken off (`release`). One still in its handshake
when the bar comes waits for the bar to lapse (the handshake's last packet goes through the
listening socket's program too), then for its peer's next retry.

At most BARRED_MAX addresses are barred at once; past that an address is refused by reset
alone, as it is where the kernel refuses the program (not Linux, say: logged once).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import ipaddress
import logging
import socket
import struct
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

BARRED_MAX = 64  # addresses barred at once: the program grows with them, and its memory
LAPSE_SLACK_S = 0.05  # bars lifted up to this late, so that one update lifts several
SO_ATTACH_FILTER = getattr(socket, "SO_ATTACH_FILTER", 26)  # Linux's numbers
SO_DETACH_FILTER = getattr(socket, "SO_DETACH_FILTER", 27)

# classic BPF (linux/filter.h): instruction classes, modes and the offset of the network header
BPF_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
BPF_RET_K = 0x06 | 0x00  # BPF_RET | BPF_K
SKF_NET_OFF = -0x100000  # loads relative to the IP header, not to the TCP one
DROP, KEEP = 0, 0xFFFFFFFF  # what a program returns: bytes of the packet kept
# where the source address is in the IP header, and the IP version, of each family
SOURCE_AT: dict[int, int] = {socket.AF_INET: 12, socket.AF_INET6: 8}
VERSION: dict[int, int] = {socket.AF_INET: 4, socket.AF_INET6: 6}


class _Instruction(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


def program(family: int, addresses: list[bytes]) -> list[tuple[int, int, int, int]]:
    """The filter that drops every packet whose source is one of `addresses` (packed, of the
    family's length) and keeps the rest, as (code, jt, jf, k) instructions.

    For each address, its 32-bit words are compared one after another; a word that differs
    jumps past the rest of that address's comparisons and its drop."""
    at = (SKF_NET_OFF + SOURCE_AT[family]) & 0xFFFFFFFF
    out: list[tuple[int, int, int, int]] = []
    for address in addresses:
        words = [int.from_bytes(address[i : i + 4], "big") for i in range(0, len(address), 4)]
        for n, word in enumerate(words):
            to_drop = 2 * (len(words) - n - 1)  # instructions between this jump and the drop
            out.append((BPF_LD_W_ABS, 0, 0, at + 4 * n))
            out.append((BPF_JEQ_K, 0, to_drop + 1, word))
        out.append((BPF_RET_K, 0, 0, DROP))
    out.append((BPF_RET_K, 0, 0, KEEP))
    return out


def attach(listening: socket.socket, instructions: list[tuple[int, int, int, int]]) -> None:
    """Puts `instructions` on the socket, in place of any program it had."""
    array = (_Instruction * len(instructions))(*(_Instruction(*i) for i in instructions))
    fprog = struct.pack("@HP", len(instructions), ctypes.addressof(array))  # struct sock_fprog
    listening.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)  # the kernel copies it


def detach(listening: socket.socket) -> None:
    with contextlib.suppress(OSError, ValueError):  # ENOENT: it had none; ValueError: closed
        listening.setsockopt(socket.SOL_SOCKET, SO_DETACH_FILTER, 0)


class KernelBar:
    """Addresses barred on the listening sockets given to `listen_on`, each until its time."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._sockets: list[socket.socket] = []
        self._until: dict[str, float] = {}  # address: its bar ends (clock), oldest bar first
        self._pending: asyncio.TimerHandle | None = None  # the next update of the programs
        self._pending_at = 0.0  # when it runs (clock)
        self._working = True  # the kernel takes the programs; False once closed too
        self._attached = False  # a program was put on a listening socket (ever)
        self.barred_total = 0  # bars set, since the start

    def __len__(self) -> int:
        return len(self._until)

    def listen_on(self, sockets: list[socket.socket]) -> None:
        self._sockets = [s for s in sockets if s.family in SOURCE_AT]

    def barred(self, address: str) -> bool:
        return self._until.get(address, 0.0) > self._clock()

    def bar(self, address: str, seconds: float) -> bool:
        """Bars `address` for `seconds` from now (or longer, if it is barred longer already);
        whether this made a new bar (False: it was barred, or there are BARRED_MAX already, or
        no socket takes the program)."""
        if not self._sockets or not self._working:
            return False
        now = self._clock()
        if address in self._until:
            self._until[address] = max(self._until[address], now + seconds)
            return False
        if len(self._until) >= BARRED_MAX:
            return False
        try:
            ipaddress.ip_address(address)
        except ValueError:
            return False
        self._until[address] = now + seconds
        self.barred_total += 1
        self._update_at(now)
        return True

    def release(self, accepted: socket.socket) -> None:
        """Takes off an accepted connection the program it inherited from its listening socket:
        it would run on every packet of the connection, and keep that version of the program
        in the kernel, for the connection's life."""
        if self._attached:
            detach(accepted)

    def _update_at(self, at: float) -> None:
        """The programs are updated at `at` (clock), or earlier if an update is due earlier."""
        if self._pending is not None:
            if self._pending_at <= at:
                return
            self._pending.cancel()
        self._pending_at = at
        delay_s = max(0.0, at - self._clock())
        self._pending = asyncio.get_running_loop().call_later(delay_s, self._update)

    def _update(self) -> None:
        """Drops the bars that have lapsed, puts the rest on every socket, and comes back when
        the next one lapses."""
        self._pending = None
        if not self._working:
            return
        now = self._clock()
        self._until = {a: until for a, until in self._until.items() if until > now}
        for listening in self._sockets:
            try:
                self._put_on(listening)
            except (OSError, ValueError) as err:  # ValueError: a socket closed meanwhile
                log.warning(
                    "barring addresses in the kernel failed (%s): an address past its "
                    "connection rate is refused by reset alone from now on",
                    err,
                )
                self.close()
                return
        if self._until:  # bars that lapse close together are lifted by one update
            self._update_at(min(self._until.values()) + LAPSE_SLACK_S)

    def _put_on(self, listening: socket.socket) -> None:
        """Puts the program of the bars of the socket's family on it. The old program is taken
        off first (the kernel counts both against the socket's memory while it swaps them);
        where the kernel has no memory for the new one, the newest half of those bars are
        lifted and it tries again."""
        addresses = [
            a for a in self._until if ipaddress.ip_address(a).version == VERSION[listening.family]
        ]
        detach(listening)
        while addresses:
            try:
                packed = [ipaddress.ip_address(a).packed for a in addresses]
                attach(listening, program(listening.family, packed))
                self._attached = True
                return
            except OSError as err:
                if err.errno != errno.ENOMEM or len(addresses) == 1:
                    raise
                log.warning(
                    "the kernel has no memory for a program barring %d addresses: the "
                    "newest %d are not barred",
                    len(addresses),
                    len(addresses) - len(addresses) // 2,
                )
                for lifted in addresses[len(addresses) // 2 :]:
                    del self._until[lifted]
                addresses = addresses[: len(addresses) // 2]

    def close(self) -> None:
        """Lifts every bar, for good: none is set after."""
        self._working = False
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None
        self._until.clear()
        for listening in self._sockets:
            if listening.fileno() >= 0:
                detach(listening)
        self._sockets = []
