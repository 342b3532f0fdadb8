"""Seeded simulations of the ledger client state machines against in-test bookies."""
