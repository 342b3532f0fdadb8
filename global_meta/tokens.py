"""The tokens a deployment issued and the ones it revoked, in ZooKeeper.

    /globelog/tokens/issued/<id>    {"sub", "scope", "iat", "exp", "issued_by"}  (never the token)
    /globelog/tokens/revoked/<id>   {"exp", "revoked_at", "revoked_by"}

Every proxy follows `revoked/` with a supervised watch: a token revoked stops working on every
proxy once its watch fires (a ZooKeeper round trip). Records of expired tokens are pruned
(`prune_expired`, at most every PRUNE_EVERY_S by a proxy): an expired token is refused by its
expiry anyway; a revocation is kept an hour past its token's expiry, so a proxy whose clock is
behind does not see the token come back. Reads `sync` first: a proxy reads its own region's
ZooKeeper server, which may not have seen a token issued through another region yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.errors import (
    ConfigError,
    MetadataUnavailableError,
    NodeExistsError,
    NoNodeError,
    OverCapacityError,
    UnauthenticatedError,
)
from core.security.credentials import read_token_file
from core.security.settings import SecuritySettings
from core.security.tokens import LEEWAY_S, Token, load_public_key, verify
from global_meta.followers import Follower, FollowerStatus
from global_meta.store import MetaStore

ROOT = "/globelog/tokens"
ISSUED = f"{ROOT}/issued"
REVOKED = f"{ROOT}/revoked"
# Live (unexpired) tokens on record at most: issuing past it is refused until some expire or
# are revoked and expire. Bounds the znodes an admin token can make (I10).
ISSUED_MAX = 10_000
LIST_MAX = 1000  # tokens one listing answers (the oldest first)
REVOKED_KEPT_S = 3600.0  # a revocation outlives its token's expiry by this much
PRUNE_EVERY_S = 60.0
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class IssuedToken:
    token_id: str
    subject: str
    scope: dict[str, list[str]]
    issued_at: float
    expires_at: float
    issued_by: str
    revoked: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.token_id,
            "sub": self.subject,
            "scope": self.scope,
            "iat": self.issued_at,
            "exp": self.expires_at,
            "issued_by": self.issued_by,
            "revoked": self.revoked,
        }


async def record_issued(
    store: MetaStore, token: Token, issued_by: str, issuer_id: str, now: float
) -> None:
    """Puts `token` on record; OverCapacityError when ISSUED_MAX live ones are."""
    await store.ensure_path(ISSUED)
    names = await store.children(ISSUED)
    if len(names) >= ISSUED_MAX:
        await prune_expired(store, now)
        if len(await store.children(ISSUED)) >= ISSUED_MAX:
            raise OverCapacityError(
                f"{ISSUED_MAX} unexpired tokens are on record (revoked ones count until they "
                "expire); issue again once some have expired"
            )
    body = {
        "sub": token.subject,
        "scope": token.scope.claim(),
        "iat": token.issued_at,
        "exp": token.expires_at,
        "issued_by": issued_by,
        "issuer_id": issuer_id,
    }
    await store.create(f"{ISSUED}/{token.token_id}", json.dumps(body).encode())


ADMIN_ISSUER = "security init"  # who issued the first admin token, as its record says


async def record_admin_token(
    store: MetaStore, security: SecuritySettings, now: float
) -> str | None:
    """Puts the deployment's admin token (`globelog security init` made it, before ZooKeeper
    ran) on record, so `token list` shows it and `token revoke` can end it by id; its id, or
    None if this host holds no valid one. Idempotent."""
    if not (security.tokens and security.admin_token.is_file() and security.public_key.is_file()):
        return None
    public = load_public_key(security.public_key.read_bytes(), str(security.public_key))
    try:
        token = verify(read_token_file(security.admin_token, "admin token"), public, now)
    except (UnauthenticatedError, ConfigError) as err:
        log.warning("admin token %s not put on record: %s", security.admin_token, err)
        return None
    with contextlib.suppress(NodeExistsError):
        await record_issued(store, token, ADMIN_ISSUER, "", now)
    return token.token_id


async def issued_tokens(
    store: MetaStore, now: float, visible: Callable[[IssuedToken], bool]
) -> list[IssuedToken]:
    """The unexpired tokens on record that `visible` keeps, oldest first, at most LIST_MAX."""
    await store.sync(ROOT)
    revoked = set(await _children(store, REVOKED))
    found = []
    for name in sorted(await _children(store, ISSUED)):
        token = await _issued(store, name, name in revoked)
        if token is not None and token.expires_at >= now and visible(token):
            found.append(token)
    return sorted(found, key=lambda t: (t.issued_at, t.token_id))[:LIST_MAX]


async def issued_token(store: MetaStore, token_id: str, now: float) -> IssuedToken | None:
    """The unexpired token on record with this id, or None."""
    await store.sync(ROOT)
    revoked = await store.exists(f"{REVOKED}/{token_id}") is not None
    token = await _issued(store, token_id, revoked)
    return token if token is not None and token.expires_at >= now else None


async def _issued(store: MetaStore, token_id: str, revoked: bool) -> IssuedToken | None:
    """The record of `token_id`; None when it is gone or malformed (logged)."""
    try:
        body = json.loads((await store.get(f"{ISSUED}/{token_id}"))[0])
        return IssuedToken(
            token_id,
            str(body["sub"]),
            dict(body["scope"]),
            float(body["iat"]),
            float(body["exp"]),
            str(body["issued_by"]),
            revoked,
        )
    except NoNodeError:
        return None
    except (ValueError, KeyError, TypeError) as err:
        log.warning("token record %s is malformed, skipped: %r", token_id, err)
        return None


async def revoke(store: MetaStore, token: IssuedToken, revoked_by: str, now: float) -> bool:
    """Revokes `token`; False when it already was."""
    await store.ensure_path(REVOKED)
    body = {"exp": token.expires_at, "revoked_at": now, "revoked_by": revoked_by}
    try:
        await store.create(f"{REVOKED}/{token.token_id}", json.dumps(body).encode())
    except NodeExistsError:
        return False
    return True


async def prune_expired(store: MetaStore, now: float) -> int:
    """Removes the records of tokens expired (past the clock leeway; revocations an hour
    later); how many it removed. A malformed record is left, and logged."""
    removed = 0
    for folder, kept_s in ((ISSUED, LEEWAY_S), (REVOKED, REVOKED_KEPT_S)):
        for name in await _children(store, folder):
            path = f"{folder}/{name}"
            with contextlib.suppress(NoNodeError):
                data, stat = await store.get(path)
                try:
                    expires = float(json.loads(data)["exp"])
                except (ValueError, KeyError, TypeError) as err:
                    log.warning("token record %s is malformed, kept: %r", path, err)
                    continue
                if expires + kept_s < now:
                    await store.delete(path, version=stat.version)
                    removed += 1
    return removed


async def _children(store: MetaStore, path: str) -> list[str]:
    try:
        return await store.children(path)
    except NoNodeError:
        return []


class RevocationWatch:
    """The ids of revoked tokens, kept current by a supervised ZooKeeper watch. `start()`
    returns once the list was read (a proxy that served before would let every revoked token
    in), within FIRST_READ_TIMEOUT_S."""

    FIRST_READ_TIMEOUT_S = 30.0

    def __init__(
        self, store: MetaStore, on_failed: Callable[[FollowerStatus], None] | None = None
    ) -> None:
        self._store = store
        self.revoked: frozenset[str] = frozenset()
        self._read = asyncio.Event()
        self._follower = Follower("revoked tokens", self._follow, on_failed=on_failed)

    async def start(self) -> None:
        self._follower.start()
        try:
            async with asyncio.timeout(self.FIRST_READ_TIMEOUT_S):
                await self._read.wait()
        except TimeoutError:
            await self._follower.stop()
            raise MetadataUnavailableError(
                f"the revoked tokens could not be read in {self.FIRST_READ_TIMEOUT_S:.0f} s: "
                f"{self._follower.status().last_error or 'no answer'}"
            ) from None

    def status(self) -> FollowerStatus:
        return self._follower.status()

    async def _follow(self, following: Callable[[], None]) -> None:
        await self._store.ensure_path(REVOKED)  # again after each restart: it may be gone
        async with contextlib.aclosing(self._store.watch_children(REVOKED)) as watch:
            async for names in watch:
                self.revoked = frozenset(names)
                self._read.set()
                following()

    async def stop(self) -> None:
        await self._follower.stop()
