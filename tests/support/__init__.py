"""Test support code (not tests): processes, servers, a browser, harnesses and shared topologies.

The suite's `conftest.py` puts `tests/` on the import path, so test modules import these as
`support.<module>`.
"""
