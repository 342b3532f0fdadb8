"""Region-aware placement: which bookies store a ledger and in what order to read them; no IO.

The rule every ensemble keeps (core.durability, invariant I6): for every round-robin write
set (entry e is stored at ensemble positions e mod E, ..., e+W-1 mod E), no ack quorum of
A copies fits inside fewer than `min_regions_for_durability` regions. Inside each region
the copies are spread over racks as evenly as the usable bookies allow (the rack spread).

The interface the ledger client calls (`PlacementPolicy`, implemented by `PlacementState`):

    new_ensemble(replication, excluded=frozenset(), now_s=None) -> tuple[str, ...]
        E bookie ids in ensemble position order. The writer's region comes first, the
        others rotate from call to call; positions interleave regions so every window is
        balanced. Raises QuorumSettingsError (settings can never work; says the smallest
        valid ack quorum and why) or NotEnoughBookiesError (retriable; names the constraint
        and the usable/down/read-only/excluded/drained bookies per region and rack).
    replace_bookie(replication, ensemble, bookie_id, excluded=frozenset(), now_s=None)
        The ensemble with `bookie_id` swapped, at the same index: same rack first, then
        same region, then the allowed region with the fewest copies; never into a drained
        region. Raises NotEnoughBookiesError, or EnsembleNotAdheringError when the other
        members already break the rule (roll to a new ensemble instead).
    read_order(write_set, now_s) -> tuple[str, ...]
        Local rack, local region, remote; one healthy remote at position min(#local, 2);
        recent failures, read-only, slow and unavailable bookies move back.
    speculative_delays(order, now_s) -> tuple[float, ...]
        Seconds to wait after asking order[k] before also asking order[k+1]: recent p99
        times a margin, backed off exponentially, floored and capped.
    record_failure(bookie_id, now_s), record_slow(bookie_id, now_s),
    record_latency(bookie_id, latency_s, now_s), set_pending_requests(bookie_id, count)
        Observations; they expire after HealthConfig.history_ttl_s (60 s by default).

Operators and drivers also use `PlacementState.update_membership`, `drain_region`,
`members_to_move`, `member_to_spread` (an open ensemble placed while a region was away, to
move back over it) and `audit` (an `AdherenceReport` with `describe()`), or the pure
functions directly: `new_ensemble`, `replace_bookie`, `audit_ensemble`, `read_order`,
`speculative_delays`, `check_quorum`. Bookies are ids "host:port" located by
`LocatedBookie(bookie_id, region, rack)`; `located_bookies(topology)` adapts core.topology.
"""

from placement.audit import Adherence, AdherenceReport, WindowFinding, audit_ensemble
from placement.cluster import ClusterView
from placement.ensemble import EnsembleRequest, new_ensemble
from placement.errors import (
    EnsembleNotAdheringError,
    NotEnoughBookiesError,
    PlacementError,
    QuorumSettingsError,
    UnknownRegionError,
)
from placement.health import BookieHealth, HealthConfig
from placement.locations import ClientLocation, LocatedBookie, located, located_bookies
from placement.policy import PlacementConfig, PlacementPolicy, PlacementState
from placement.quorum import check_quorum
from placement.read_order import ReadOrderConfig, ReadView, read_order
from placement.replace import ReplaceRequest, replace_bookie
from placement.speculation import SpeculationConfig, speculative_delays
from placement.topology_file import load_checked_topology

__all__ = [
    "Adherence",
    "AdherenceReport",
    "BookieHealth",
    "ClientLocation",
    "ClusterView",
    "EnsembleNotAdheringError",
    "EnsembleRequest",
    "HealthConfig",
    "LocatedBookie",
    "NotEnoughBookiesError",
    "PlacementConfig",
    "PlacementError",
    "PlacementPolicy",
    "PlacementState",
    "QuorumSettingsError",
    "ReadOrderConfig",
    "ReadView",
    "ReplaceRequest",
    "SpeculationConfig",
    "UnknownRegionError",
    "WindowFinding",
    "audit_ensemble",
    "check_quorum",
    "load_checked_topology",
    "located",
    "located_bookies",
    "new_ensemble",
    "read_order",
    "replace_bookie",
    "speculative_delays",
]
