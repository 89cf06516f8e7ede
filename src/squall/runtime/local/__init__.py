"""The in-process reference runner: per-tuple execution in one process, real or simulated time."""

from squall.runtime.local.engine import LocalEngine

__all__ = ["LocalEngine"]
