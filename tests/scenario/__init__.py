"""Scenario tests: golden scripts driving the pure state machines."""
