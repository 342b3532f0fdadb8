"""The ledger client's pure state machines: events in, actions out, time an input, no IO.

add_state (+ add_events, add_sends), recovery_state (+ recovery_events), read_lac_state,
read_state, and signals (what they share). They never import the connections, asyncio or
ZooKeeper (tests/unit/test_layers.py), so the drivers and the deterministic simulation
(verify/sim) run the same code.
"""
