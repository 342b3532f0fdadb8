"""What a status line says of a degraded proxy: the streams and followers not following, for
how long and why, and a count of the rest; and the row's state (neither up nor down)."""

from __future__ import annotations

from typing import Any

from console.health import row as _row
from localcluster.probes import HEALTH_NAMES_MAX, _not_following


def follower(state: str, error: str | None = None) -> dict[str, Any]:
    return {"state": state, "for_s": 4.2, "restarts": 3, "last_error": error}


def test_a_degraded_read_proxy_names_its_streams_and_followers_with_their_causes() -> None:
    cause = "metadata_unavailable: no ZooKeeper session"
    body = {
        "state": "degraded",
        "not_following": {"ns/s0": follower("restarting", cause)},
        "not_following_count": 1,
        "followers": {
            "registration": follower("running"),
            "bookie membership": follower("starting"),
        },
    }
    assert _not_following(body) == (
        f"stream ns/s0 restarting for 4.2 s (3 restarts; {cause}); "
        "bookie membership starting for 4.2 s (3 restarts; None)"
    )


def test_streams_beyond_those_named_are_counted() -> None:
    named = {f"ns/s{i}": follower("restarting") for i in range(100)}
    body = {"state": "degraded", "not_following": named, "not_following_count": 250}
    detail = _not_following(body)
    assert detail.count("stream ns/") == HEALTH_NAMES_MAX
    assert detail.endswith(f"and {250 - HEALTH_NAMES_MAX} more")


def test_a_degraded_proxy_row_is_neither_up_nor_down() -> None:
    row = _row("read-proxy", "rp-eu-west", "eu-west", "127.0.0.1:1", False, "degraded, 2 stream(s)")
    assert row["state"] == "degraded"
    assert _row("read-proxy", "rp", "eu-west", "a", False, "not serving: X")["state"] == "down"
