"""Simulation tests: seeded faults over the pure state machines."""
