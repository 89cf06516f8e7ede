"""`squall.panes.input_watermarks.InputWatermarks`: an operator task's watermark from its inputs.

The rules (the minimum over inputs, generated watermarks) are tested with the engine in
`test_windows_engine.py`; here, what the module move must keep: the old import paths, snapshots
that name the old module, and inputs read from partitioned sources.
"""

from __future__ import annotations

import pickle

from squall.panes import engine
from squall.panes.input_watermarks import InputWatermarks
from squall.partition_watermarks import FROM, OWN, PartitionWatermarks
from squall.windows import InputWatermarks as PublicInputWatermarks


def test_the_engine_module_and_the_facade_name_the_same_class():
    assert engine.InputWatermarks is InputWatermarks
    assert PublicInputWatermarks is InputWatermarks


def test_a_snapshot_naming_the_engine_module_still_loads():
    w = InputWatermarks([frozenset({1})], 100)
    assert w.observe(0, 1000) == 900
    # What a snapshot written before the move holds: the class under squall.panes.engine.
    # (Protocol 2 names a class as text, without frames to adjust.)
    raw = pickle.dumps(w, protocol=2)
    moved = b"csquall.panes.input_watermarks\nInputWatermarks\n"
    assert moved in raw
    old = raw.replace(moved, b"csquall.panes.engine\nInputWatermarks\n")
    restored = pickle.loads(old)
    assert type(restored) is InputWatermarks
    assert restored.current() == 900
    assert restored.upstream(0, 1, 2000) == 2000


def test_a_snapshot_from_before_partition_watermarks_loads_without_them():
    w = InputWatermarks([frozenset(), frozenset({3})], None)
    state = dict(vars(w))
    del state["partitioned"]
    restored = InputWatermarks.__new__(InputWatermarks)
    restored.__setstate__(state)
    assert restored.partitioned == [None, None]


def test_a_partitioned_input_takes_its_partitions_watermark():
    parts = PartitionWatermarks(frozenset({1}), 10, {})
    w = InputWatermarks([frozenset()], 10, [parts])
    parts.control(1, OWN, ["a"])
    parts.control(1, FROM, ["a"])
    assert w.observe(0, 500) is None  # the input's largest timestamp is not its watermark
    assert parts.observe(1, 500) == 490
    assert w.refresh() == 490
    assert w.current() == 490
