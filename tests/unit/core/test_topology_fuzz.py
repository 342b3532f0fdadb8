"""topology.yaml under malformed input: thousands of mutated documents and raw texts, each
either a topology or a TopologyError listing its problems, never another exception."""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import TopologyError
from core.topology import Topology
from core.topology_loader import parse_topology
from tests.support.topologies import topology_document

pytestmark = pytest.mark.unit

BASE = topology_document()
# CI's share; GLOBELOG_FUZZ_SCALE=10 runs ten times as many (docs/reliability.md records runs)
SCALE = int(os.environ.get("GLOBELOG_FUZZ_SCALE", "1"))
MUTATIONS = 600 * SCALE
RAW_TEXTS = 300 * SCALE

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, child in node.items():
            found += paths(child, (*prefix, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found += paths(child, (*prefix, index))
    return found


ALL_PATHS = paths(BASE)[1:]


def outcome(document: Any) -> None:
    try:
        text = yaml.safe_dump(document)
    except yaml.YAMLError:
        return  # not even expressible as YAML
    try:
        topology = parse_topology(text, "fuzz.yaml")
    except TopologyError as err:
        assert err.problems, "a refusal names at least one problem"
        assert all(isinstance(p, str) and p for p in err.problems)
        assert str(err).startswith("fuzz.yaml: ")
        return
    assert isinstance(topology, Topology)


@settings(max_examples=MUTATIONS, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(ALL_PATHS),
    st.sampled_from(["replace", "delete", "add-key"]),
    values,
    st.text(max_size=10),
)
def test_mutated_documents_are_topologies_or_refused_with_problems(
    path: tuple[Any, ...], action: str, value: Any, key: str
) -> None:
    document = copy.deepcopy(BASE)
    parent: Any = document
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if action == "replace":
        parent[last] = value
    elif action == "delete":
        del parent[last]
    elif isinstance(parent[last], dict):
        parent[last][key] = value
    else:
        parent[last] = {key: value}
    outcome(document)


@settings(max_examples=RAW_TEXTS, deadline=None)
@given(st.text(max_size=400))
def test_any_text_is_a_topology_or_refused(text: str) -> None:
    try:
        parse_topology(text, "fuzz.yaml")
    except TopologyError as err:
        assert err.problems
