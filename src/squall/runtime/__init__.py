"""Execution: the clock, the per-task runtime shared by all runners, and the runners."""
