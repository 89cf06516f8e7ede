"""Configuration is checked before a run on both runners and at `-c`.

Before: a misspelt key was accepted silently, `ten` seconds ended in a raw ValueError from deep
in a runner, and `topology.max.spout.pending=-5` hung at `emitted=0`.
"""

from __future__ import annotations

import logging
import re

import pytest
from support.cli import squall
from support.examples import ROOT

from squall import BasicBolt, ConfigError, Fields, TopologyBuilder, run
from squall.runners import make_runner
from squall.testing import FixedTupleSpout
from squall.topology.config_keys import KEYS, STORM_KEYS_WITHOUT_EFFECT


class Echo(BasicBolt):
    def execute(self, tup, collector):
        collector.emit([tup.values[0]])

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("n"))


def numbers():
    b = TopologyBuilder()
    b.set_spout("numbers", FixedTupleSpout([[1], [2]], Fields("n")))
    return b


BAD = [
    ({"topology.mesage.timeout.secs": 10},
     "unknown configuration key 'topology.mesage.timeout.secs': "
     "did you mean 'topology.message.timeout.secs'?"),
    ({"topology.message.timeout.secs": "ten"},
     "topology.message.timeout.secs must be a positive number of seconds, got 'ten'"),
    ({"topology.max.spout.pending": -5},
     "topology.max.spout.pending must be a positive integer (0 or unset: no bound), got -5"),
    ({"topolgy.debug": True}, "unknown configuration key 'topolgy.debug': "
                              "did you mean 'topology.debug'?"),
    ({"topology.debug": "yes"}, "topology.debug must be true or false, got 'yes'"),
    ({"squall.spark.batch.max.tuples": 0},
     "squall.spark.batch.max.tuples must be a positive integer, got 0"),
    ({"topology.stats.sample.rate": 2}, "topology.stats.sample.rate must be a number in (0, 1]"),
]


@pytest.mark.runners(spark_session=False)
@pytest.mark.parametrize("conf, message", BAD, ids=[next(iter(c)) for c, _ in BAD])
def test_a_bad_key_or_value_is_refused_before_the_run_starts(runner, conf, message):
    # On Spark the check comes before a session is started: this test takes none.
    with pytest.raises(ConfigError) as info:
        run(numbers().create_topology(), conf, runner=runner)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.runners(spark_session=False)
def test_storm_keys_squall_ignores_warn_and_a_users_own_keys_pass(runner, caplog):
    # The runner is made, not started: making it is where the check and its warning are.
    with caplog.at_level(logging.WARNING, logger="squall.config"):
        make_runner(numbers().create_topology(),
                    {"topology.worker.childopts": "-Xmx2g", "myapp.threshold": 3},
                    runner=runner)
    assert [r.getMessage() for r in caplog.records] == [
        "topology.worker.childopts is a Storm key that has no effect in squall (ignored)"]


@pytest.mark.runners(spark_session=False)
def test_topology_workers_is_checked_and_warns_that_it_has_no_effect(runner, caplog):
    # squall has no workers: parallelism is per component, Spark's executors are spark.* keys.
    with caplog.at_level(logging.WARNING, logger="squall.config"):
        make_runner(numbers().create_topology(), {"topology.workers": 4}, runner=runner)
    assert [r.getMessage() for r in caplog.records] == [
        "topology.workers is a Storm key that has no effect in squall (ignored): a "
        "component's tasks are its parallelism hint (or squall run --parallelism), and on "
        "Spark executors and cores are spark.* keys"]
    with pytest.raises(ConfigError, match=re.escape(
            "topology.workers must be a positive integer, got 0")):
        make_runner(numbers().create_topology(), {"topology.workers": 0}, runner=runner)


def test_a_components_configuration_is_checked_when_the_topology_is_built():
    b = numbers()
    b.set_bolt("b", Echo()).shuffle_grouping("numbers").add_configuration(
        "topology.tick.tuple.freq.secs", "often")
    with pytest.raises(ConfigError, match=re.escape(
            "component 'b': topology.tick.tuple.freq.secs must be a positive number of seconds "
            "(0 or unset: no ticks), got 'often'")):
        b.create_topology()


@pytest.mark.parametrize("runner", ["local", "spark"])
@pytest.mark.parametrize("override, message", [
    ("topology.mesage.timeout.secs=10", "squall run: -c: unknown configuration key "
     "'topology.mesage.timeout.secs': did you mean 'topology.message.timeout.secs'?"),
    ("topology.message.timeout.secs=ten", "squall run: -c: topology.message.timeout.secs "
     "must be a positive number of seconds, got 'ten'"),
    ("topology.max.spout.pending=-5", "squall run: -c: topology.max.spout.pending must be a "
     "positive integer (0 or unset: no bound), got -5"),
])
def test_the_cli_names_the_key_the_value_and_what_is_allowed(runner, override, message):
    proc = squall("run", "examples/wordcount.py:topology", "--runner", runner, "-c", override,
                  timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == message
    assert "Traceback" not in proc.stderr


def test_every_key_squall_reads_is_registered():
    # A key read anywhere in the source must be in the registry, or a user setting it would be
    # told it does not exist.
    literal = re.compile(r"[\"']((?:topology|squall)\.[a-z0-9_.]+)[\"']")
    files = [p for p in (ROOT / "src" / "squall").rglob("*.py")
             if p.name != "config_keys.py"]
    logger = re.compile(r"getLogger\([\"'][^\"']*[\"']\)")  # logger names are not keys
    read = {m for p in files for m in literal.findall(logger.sub("", p.read_text()))}
    # The Spark runner's fingerprint file, a module and a logger named through a constant:
    # names, not keys.
    not_keys = {"topology.json", "squall.cli.main", "squall.traceback"}
    unknown = sorted(k for k in read - not_keys if k not in KEYS
                     and k not in STORM_KEYS_WITHOUT_EFFECT)
    assert unknown == []
