"""Test kit for strategy authors."""
