"""BookKeeper's cluster metadata root, created the way BookKeeper's `initnewcluster` lays it out.

Bookies refuse to start until the root exists; `globelog init` (and the local launcher)
create it from Python, so a deployment's hosts need no BookKeeper shell to bootstrap:

    /ledgers                      (empty)
    /ledgers/INSTANCEID           a random UUID: bookies stamp it in their cookies
    /ledgers/LAYOUT               "2\\n<ledger manager factory class>:<factory version>"
    /ledgers/available            bookies register here (ephemeral children)
    /ledgers/available/readonly   and here when read-only

The five nodes are created in one ZooKeeper transaction: a cluster is initialised wholly or
not at all, and two concurrent `init`s leave exactly one instance id.
"""

from __future__ import annotations

import uuid

from core import runtime
from core.errors import MetadataError, NodeExistsError
from global_meta import MetaSession
from global_meta.store import Op
from ledger.codecs.metadata import LEDGERS_ROOT

LAYOUT_FORMAT_VERSION = 2
# globelog's ledger metadata store reads and writes the hierarchical layout (docs/metadata.md)
LEDGER_MANAGER = "org.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory"
LEDGER_MANAGER_VERSION = 1
LAYOUT = f"{LAYOUT_FORMAT_VERSION}\n{LEDGER_MANAGER}:{LEDGER_MANAGER_VERSION}".encode()


def cluster_root_ops(instance_id: str, root: str = LEDGERS_ROOT) -> list[Op]:
    return [
        Op("create", root),
        Op("create", f"{root}/INSTANCEID", instance_id.encode()),
        Op("create", f"{root}/LAYOUT", LAYOUT),
        Op("create", f"{root}/available"),
        Op("create", f"{root}/available/readonly"),
    ]


async def init_cluster_metadata(store: MetaSession, root: str = LEDGERS_ROOT) -> str | None:
    """Creates the metadata root; returns the new instance id, or None when the cluster was
    initialised already (with a layout globelog reads). Raises MetadataError for a root
    left by something else: a different ledger layout, or a root without an instance id."""
    if await store.exists(root) is None:
        instance_id = str(uuid.UUID(int=runtime.new_rng().getrandbits(128), version=4))
        try:
            await store.commit(cluster_root_ops(instance_id, root))
            return instance_id
        except NodeExistsError:
            pass  # another init won the race; check what it made
    if await store.exists(f"{root}/INSTANCEID") is None:
        raise MetadataError(
            f"{root} exists without an INSTANCEID: not a BookKeeper cluster's root, or a "
            "partial initialisation by another tool; expected BookKeeper's layout "
            "(INSTANCEID, LAYOUT, available); move it aside or pick another root"
        )
    layout, _ = await store.get(f"{root}/LAYOUT")
    if layout.strip() != LAYOUT:
        raise MetadataError(
            f"{root}/LAYOUT is {layout[:120]!r}; globelog's ledger store expects {LAYOUT!r}"
        )
    return None
