"""Access tokens: scopes match what they name, tokens verify only when ours and current, and a
token issues only within its own scope."""

from __future__ import annotations

import base64
import json

import jwt
import pytest

from core.errors import BadRequestError, ForbiddenError, UnauthenticatedError
from core.security.tokens import (
    CHAIN_MAX,
    Scope,
    bearer,
    issue,
    issue_within,
    new_signing_key,
    verify,
)

pytestmark = pytest.mark.unit
KEY = new_signing_key()
NOW = 1_800_000_000.0


def scope(namespaces: list[str], streams: list[str], ops: list[str]) -> Scope:
    return Scope.parse({"namespaces": namespaces, "streams": streams, "ops": ops})


@pytest.mark.parametrize(
    ("namespaces", "streams", "ns", "stream", "allowed"),
    [
        (["orders"], ["*"], "orders", "s1", True),
        (["orders"], ["*"], "orders2", "s1", False),
        (["team-a.*"], ["*"], "team-a.x", "s", True),
        (["team-a.*"], ["*"], "team-b.x", "s", False),
        (["team-a.*"], ["*"], "team-a", "s", False),  # the prefix is "team-a.", dot included
        (["*"], ["in.*"], "anything", "in.1", True),
        (["*"], ["in.*"], "anything", "out.1", False),
        ([], ["*"], "orders", "s", False),  # no namespace named: none
    ],
)
def test_a_scope_reaches_what_its_patterns_name_and_nothing_else(
    namespaces: list[str], streams: list[str], ns: str, stream: str, allowed: bool
) -> None:
    assert scope(namespaces, streams, ["read"]).allows("read", ns, stream) is allowed
    assert not scope(namespaces, streams, ["read"]).allows("append", ns, stream)


def test_ops_without_a_resource_need_only_the_op() -> None:
    assert scope([], [], ["observe"]).allows("observe")
    assert not scope([], [], ["read"]).allows("observe")


@pytest.mark.parametrize(
    "raw",
    [
        "everything",
        {"namespaces": "orders"},
        {"namespaces": ["a/b"]},
        {"namespaces": ["*a"]},
        {"namespaces": ["a**"]},
        {"ops": ["write"]},
        {"tenants": ["x"]},
        {"streams": ["x"] * 65},
    ],
)
def test_a_bad_scope_is_refused_saying_what_was_expected(raw: object) -> None:
    with pytest.raises(BadRequestError, match="expected"):
        Scope.parse(raw)


@pytest.mark.parametrize(
    ("inner", "outer", "within"),
    [
        ((["orders"], ["s"], ["read"]), (["orders"], ["*"], ["read", "append"]), True),
        ((["team-a.x.*"], ["*"], ["read"]), (["team-a.*"], ["*"], ["read"]), True),
        ((["team-a.*"], ["*"], ["read"]), (["team-a.x.*"], ["*"], ["read"]), False),
        ((["*"], ["*"], ["read"]), (["orders"], ["*"], ["read"]), False),
        ((["orders"], ["*"], ["admin"]), (["orders"], ["*"], ["read"]), False),
        ((["orders"], ["*"], ["read"]), (["orders"], ["s"], ["read"]), False),
    ],
)
def test_within_holds_only_when_every_name_and_op_is_covered(
    inner: tuple[list[str], list[str], list[str]],
    outer: tuple[list[str], list[str], list[str]],
    within: bool,
) -> None:
    assert scope(*inner).within(scope(*outer)) is within


def test_an_issued_token_verifies_with_its_claims() -> None:
    raw, claims = issue(KEY, "alice", scope(["orders"], ["*"], ["read"]), NOW, 3600)
    token = verify(raw, KEY.public_key(), NOW + 10)
    assert token == claims
    assert token.subject == "alice" and token.expires_at == NOW + 3600


def test_an_expired_token_is_refused_after_the_leeway() -> None:
    raw, _ = issue(KEY, "alice", Scope.everything(), NOW, 60)
    verify(raw, KEY.public_key(), NOW + 62)  # within the 5 s leeway
    with pytest.raises(UnauthenticatedError, match="expired 10 s ago"):
        verify(raw, KEY.public_key(), NOW + 70)


def test_a_token_of_another_key_or_altered_is_refused() -> None:
    raw, _ = issue(KEY, "alice", scope(["orders"], ["*"], ["read"]), NOW, 60)
    with pytest.raises(UnauthenticatedError, match="signature invalid"):
        verify(raw, new_signing_key().public_key(), NOW)
    header, payload, signature = raw.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["scope"]["namespaces"] = ["*"]
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(UnauthenticatedError, match="signature invalid"):
        verify(f"{header}.{forged}.{signature}", KEY.public_key(), NOW)


@pytest.mark.parametrize("raw", ["", "abc", "a.b.c", "x" * 9000])
def test_garbage_is_refused_as_unauthenticated(raw: str) -> None:
    with pytest.raises(UnauthenticatedError):
        verify(raw, KEY.public_key(), NOW)


def test_a_token_signed_with_no_algorithm_is_refused() -> None:
    unsigned = (
        base64.urlsafe_b64encode(b'{"alg":"none","typ":"JWT"}').rstrip(b"=").decode()
        + "."
        + base64.urlsafe_b64encode(
            json.dumps(
                {"sub": "eve", "jti": "x", "iat": NOW, "exp": NOW + 60, "scope": {"ops": ["admin"]}}
            ).encode()
        )
        .rstrip(b"=")
        .decode()
        + "."
    )
    with pytest.raises(UnauthenticatedError, match="malformed"):
        verify(unsigned, KEY.public_key(), NOW)


@pytest.mark.parametrize(
    ("header", "message"),
    [(None, "no token"), ("Basic abc", "expected 'Bearer <token>'"), ("Bearer ", "expected")],
)
def test_the_header_must_carry_a_bearer_token(header: str | None, message: str) -> None:
    with pytest.raises(UnauthenticatedError, match=message):
        bearer(header)
    assert bearer("Bearer abc ") == "abc"


def test_a_token_issues_only_within_its_scope_and_lifetime() -> None:
    _, admin = issue(KEY, "ops", scope(["team-a.*"], ["*"], ["read", "admin"]), NOW, 600)
    _, child = issue_within(admin, KEY, "bob", scope(["team-a.x"], ["*"], ["read"]), NOW, 86400)
    assert child.expires_at == admin.expires_at  # no later than the issuer's
    with pytest.raises(ForbiddenError, match="only within its scope"):
        issue_within(admin, KEY, "bob", scope(["team-b"], ["*"], ["read"]), NOW, 60)
    with pytest.raises(ForbiddenError, match="only within its scope"):
        issue_within(admin, KEY, "bob", scope(["team-a.x"], ["*"], ["append"]), NOW, 60)
    _, reader = issue(KEY, "carol", scope(["*"], ["*"], ["read"]), NOW, 600)
    with pytest.raises(ForbiddenError, match="may not admin"):
        issue_within(reader, KEY, "bob", scope(["x"], ["*"], ["read"]), NOW, 60)


def test_forbidden_names_the_op_and_the_resource() -> None:
    _, token = issue(KEY, "alice", scope(["orders"], ["*"], ["read"]), NOW, 60)
    token.require("read", "orders", "s1")
    with pytest.raises(ForbiddenError, match=r"may not append stream orders/s1"):
        token.require("append", "orders", "s1")
    with pytest.raises(ForbiddenError, match="may not observe this proxy"):
        token.require("observe")


@pytest.mark.parametrize("subject", ["", "a b", "-x", "x" * 129])
def test_a_bad_subject_is_refused(subject: str) -> None:
    with pytest.raises(BadRequestError, match="subject"):
        issue(KEY, subject, Scope.everything(), NOW, 60)


def test_an_issued_token_carries_its_issuers_and_revoking_one_revokes_it() -> None:
    everything = Scope.everything()
    _, root = issue(KEY, "ops", everything, NOW, 600)
    raw_child, child = issue_within(root, KEY, "team", everything, NOW, 600)
    raw_grandchild, grandchild = issue_within(child, KEY, "app", everything, NOW, 600)
    assert verify(raw_child, KEY.public_key(), NOW).chain == (root.token_id,)
    assert verify(raw_grandchild, KEY.public_key(), NOW).chain == (
        root.token_id,
        child.token_id,
    )
    assert grandchild.revoked_by(frozenset()) is None
    assert grandchild.revoked_by(frozenset({grandchild.token_id})) == grandchild.token_id
    assert grandchild.revoked_by(frozenset({root.token_id})) == root.token_id
    assert child.revoked_by(frozenset({grandchild.token_id})) is None  # not upwards


def test_tokens_issue_others_only_so_deep() -> None:
    _, token = issue(KEY, "ops", Scope.everything(), NOW, 600)
    for _ in range(CHAIN_MAX):
        _, token = issue_within(token, KEY, "next", Scope.everything(), NOW, 600)
    assert len(token.chain) == CHAIN_MAX
    with pytest.raises(ForbiddenError, match=f"at most {CHAIN_MAX} deep"):
        issue_within(token, KEY, "one-more", Scope.everything(), NOW, 600)


@pytest.mark.parametrize("chain", ["abc", [1], ["not-an-id"], ["0" * 32] * (CHAIN_MAX + 1)])
def test_a_signed_token_with_a_malformed_chain_is_refused(chain: object) -> None:
    claims = {"sub": "x", "jti": "0" * 32, "iat": int(NOW), "exp": int(NOW) + 60, "chain": chain}
    claims["scope"] = Scope.everything().claim()
    raw = jwt.encode(claims, KEY, algorithm="EdDSA")
    with pytest.raises(UnauthenticatedError, match="claims invalid"):
        verify(raw, KEY.public_key(), NOW)
