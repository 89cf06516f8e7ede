"""Configuration is checked before a run on both runners and at `-c`: a misspelt key, a value
of the wrong kind (`ten` seconds) or out of range (`topology.max.spout.pending=-5`) is refused
naming the key, never accepted silently or left to fail deep in a runner. Every kind of topology
(Storm API, transactional, Trident) is checked once, when its runner is made, and a runner built
directly checks its configuration the same way.
"""

from __future__ import annotations

import logging
import re

import pytest
from support.cli import squall
from support.examples import ROOT

from squall import BasicBolt, ConfigError, Fields, TopologyBuilder, run
from squall.runners import make_runner
from squall.runtime.local.engine import LocalEngine
from squall.runtime.local.trident import LocalTridentRunner
from squall.runtime.spark.driver import SparkRunner
from squall.runtime.spark.transactional import TransactionalSparkRunner
from squall.runtime.spark.trident import TridentSparkRunner
from squall.testing import FixedTupleSpout
from squall.topology.config_keys import KEYS, STORM_KEYS_WITHOUT_EFFECT
from squall.transactional import BatchBolt, Committer, MemoryTransactionalSpout
from squall.transactional.builder import TransactionalTopologyBuilder
from squall.trident import FixedBatchSpout, TridentTopology


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


class Counted(BatchBolt, Committer):
    def prepare(self, conf, context, collector, attempt):
        self.n = 0

    def execute(self, tup):
        self.n += 1


def transactional_numbers():
    spout = MemoryTransactionalSpout({0: [[1], [2]]}, Fields("n"), 1)
    b = TransactionalTopologyBuilder("numbers-tx", "numbers", spout, 1)
    b.set_bolt("count", Counted()).global_grouping("numbers")
    return b.create_topology()


def trident_numbers():
    t = TridentTopology()
    t.new_stream("numbers", FixedBatchSpout(["n"], 1, [1], [2]))
    return t.build()


KINDS = {"storm": lambda: numbers().create_topology(), "transactional": transactional_numbers,
         "trident": trident_numbers}


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_of_topology_is_checked_once_when_its_runner_is_made(
        runner, kind, caplog, tmp_path):
    # The runner is made, not started. One warning: the configuration is resolved once, at
    # make_runner, and the runner reads what it resolved instead of checking it again.
    with caplog.at_level(logging.WARNING, logger="squall.config"):
        made = make_runner(KINDS[kind](), {"topology.worker.childopts": "-Xmx2g"},
                           runner=runner, checkpoint_location=str(tmp_path / "cp"))
    assert [r.getMessage() for r in caplog.records] == [
        "topology.worker.childopts is a Storm key that has no effect in squall (ignored)"]
    with pytest.raises(ConfigError, match=re.escape(
            "topology.max.spout.pending must be a positive integer (0 or unset: no bound), "
            "got -5")):
        make_runner(KINDS[kind](), {"topology.max.spout.pending": -5}, runner=runner,
                    checkpoint_location=str(tmp_path / "cp2"))
    assert made.topology is not None


RUNNER_CLASSES = [(LocalEngine, "storm"), (LocalEngine, "transactional"),
                  (LocalTridentRunner, "trident"), (SparkRunner, "storm"),
                  (TransactionalSparkRunner, "transactional"), (TridentSparkRunner, "trident")]


@pytest.mark.parametrize("cls, kind", RUNNER_CLASSES,
                         ids=[f"{c.__name__}-{k}" for c, k in RUNNER_CLASSES])
def test_a_runner_built_directly_checks_its_configuration_as_make_runner_does(
        cls, kind, tmp_path):
    # Refused before any Spark session is started: the Spark runners' cases take none.
    with pytest.raises(ConfigError, match=re.escape(
            "unknown configuration key 'topolgy.debug': did you mean 'topology.debug'?")):
        cls(KINDS[kind](), {"topolgy.debug": True}, checkpoint_location=str(tmp_path))


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
    # The Spark runner's fingerprint file, modules, a logger named through a constant and the
    # local properties of a Spark job that carry a batch's or a transaction's ids: names, not
    # keys.
    not_keys = {"topology.json", "squall.cli.main", "squall.traceback", "squall.stage.batch",
                "squall.trident.job", "squall.runtime.spark.worker_daemon"}
    unknown = sorted(k for k in read - not_keys if k not in KEYS
                     and k not in STORM_KEYS_WITHOUT_EFFECT)
    assert unknown == []
