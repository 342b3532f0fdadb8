"""The tokens a deployment issued and the ones it revoked, in ZooKeeper.

    /globelog/tokens/issued/<id>    {"sub", "scope", "iat", "exp", "issued_by"}  (never the token)
    /globelog/tokens/revoked/<id>   {"exp", "revoked_at", "revoked_by"}

Every proxy follows `revoked/` with a supervised watch: a token revoked stops working on every
proxy once its watch fires (a ZooKeeper round trip). Entries of expired tokens are pruned when
tokens are listed, issued or revoked: an expired token is refused by its expiry anyway.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.errors import NodeExistsError, NoNodeError, OverCapacityError
from core.security.tokens import LEEWAY_S, Token
from global_meta.followers import Follower, FollowerStatus
from global_meta.store import MetaStore

ROOT = "/globelog/tokens"
ISSUED = f"{ROOT}/issued"
REVOKED = f"{ROOT}/revoked"
# Live (unexpired) tokens on record at most: issuing past it is refused until some expire or
# are revoked and expire. Bounds the znodes an admin token can make (I10).
ISSUED_MAX = 10_000


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


async def record_issued(store: MetaStore, token: Token, issued_by: str, now: float) -> None:
    """Puts `token` on record; OverCapacityError when ISSUED_MAX live ones are."""
    await store.ensure_path(ISSUED)
    names = await store.children(ISSUED)
    if len(names) >= ISSUED_MAX:
        await prune_expired(store, now)
        if len(await store.children(ISSUED)) >= ISSUED_MAX:
            raise OverCapacityError(
                f"{ISSUED_MAX} tokens are on record and none has expired; revoke some first"
            )
    body = {
        "sub": token.subject,
        "scope": token.scope.claim(),
        "iat": token.issued_at,
        "exp": token.expires_at,
        "issued_by": issued_by,
    }
    await store.create(f"{ISSUED}/{token.token_id}", json.dumps(body).encode())


async def issued_tokens(store: MetaStore, now: float) -> list[IssuedToken]:
    """Every unexpired token on record, oldest first (expired ones are pruned)."""
    await prune_expired(store, now)
    revoked = set(await _children(store, REVOKED))
    found = []
    for name in await _children(store, ISSUED):
        with contextlib.suppress(NoNodeError):
            body = json.loads((await store.get(f"{ISSUED}/{name}"))[0])
            found.append(
                IssuedToken(
                    name,
                    body["sub"],
                    body["scope"],
                    body["iat"],
                    body["exp"],
                    body["issued_by"],
                    name in revoked,
                )
            )
    return sorted(found, key=lambda t: (t.issued_at, t.token_id))


async def issued_token(store: MetaStore, token_id: str, now: float) -> IssuedToken | None:
    return next((t for t in await issued_tokens(store, now) if t.token_id == token_id), None)


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
    """Removes the records of tokens expired (past the clock leeway); how many it removed."""
    removed = 0
    for folder in (ISSUED, REVOKED):
        for name in await _children(store, folder):
            path = f"{folder}/{name}"
            with contextlib.suppress(NoNodeError):
                data, stat = await store.get(path)
                if json.loads(data)["exp"] + LEEWAY_S < now:
                    await store.delete(path, version=stat.version)
                    removed += 1
    return removed


async def _children(store: MetaStore, path: str) -> list[str]:
    try:
        return await store.children(path)
    except NoNodeError:
        return []


class RevocationWatch:
    """The ids of revoked tokens, kept current by a supervised ZooKeeper watch."""

    def __init__(
        self, store: MetaStore, on_failed: Callable[[FollowerStatus], None] | None = None
    ) -> None:
        self._store = store
        self.revoked: frozenset[str] = frozenset()
        self._follower = Follower("revoked tokens", self._follow, on_failed=on_failed)

    async def start(self) -> None:
        await self._store.ensure_path(REVOKED)
        self._follower.start()

    def status(self) -> FollowerStatus:
        return self._follower.status()

    async def _follow(self, following: Callable[[], None]) -> None:
        async with contextlib.aclosing(self._store.watch_children(REVOKED)) as watch:
            async for names in watch:
                following()
                self.revoked = frozenset(names)

    async def stop(self) -> None:
        await self._follower.stop()
