"""The chaos suite: SIGKILLs at every phase of a run, slow batches, new input, Redis restarts.

Run by pytest (marker `chaos`; short by default, `SQUALL_CHAOS=long` for the long version) or by
hand with `python -m tests.crash.chaos`, which prints the results table. See docs/reliability.md.
"""
