"""The configuration keys squall knows, what each allows, and the check of a whole config.

Storm accepts any key and ignores what it does not know, so a typo such as
`topology.mesage.timeout.secs` silently keeps the default. squall checks a config before a run
starts (and a component's configuration when it is declared):

- a key squall reads must hold a value it can use: one line names the key, the value and what
  is allowed;
- a key under `topology.` or `squall.` that squall does not know is an error with the closest
  known key, unless it is one of Storm's own keys that squall has no use for (a topology ported
  from Storm keeps them): those get a warning that they have no effect;
- any other key is the user's own (Storm lets bolts read their own keys from the config), kept
  as it is, unless it is one letter away from a known key (`topolgy.debug`);
- `spark.*` keys go to Spark, which checks them.

>>> check_config({"topology.message.timeout.secs": 10, "myapp.threshold": 3})
[]
>>> check_config({"topology.mesage.timeout.secs": 10})  # doctest: +ELLIPSIS
Traceback (most recent call last):
squall.errors.ConfigError: unknown ... 'topology.mesage...': did you mean 'topology.message...'?
>>> check_config({"topology.max.spout.pending": -5})  # doctest: +ELLIPSIS
Traceback (most recent call last):
squall.errors.ConfigError: topology.max.spout.pending must be a positive integer (0 or ...), got -5
>>> check_config({"topology.worker.childopts": "-Xmx2g"})
['topology.worker.childopts is a Storm key that has no effect in squall (ignored)']
"""

from __future__ import annotations

import difflib
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from squall.errors import ConfigError

# A check says whether a value is usable; `KeySpec.allowed` says in words what is.
Check = Callable[[Any], bool]


@dataclass(frozen=True)
class KeySpec:
    """One key squall reads: what a value must be, in words and as a predicate."""

    allowed: str
    ok: Check


def _is_int(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    if isinstance(v, float):
        return math.isfinite(v) and v == int(v)
    if isinstance(v, str):
        try:
            int(v)
        except ValueError:
            return False
        return True
    return False


def _is_number(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError, OverflowError):
        return False


def positive_number(unset_ok: bool = False, zero_ok: bool = False) -> Check:
    def ok(v: Any) -> bool:
        if unset_ok and v is None:
            return True
        return _is_number(v) and (float(v) > 0 or (zero_ok and float(v) == 0))
    return ok


def integer(minimum: int | None = None, unset_ok: bool = False) -> Check:
    def ok(v: Any) -> bool:
        if unset_ok and v is None:
            return True
        return _is_int(v) and (minimum is None or int(v) >= minimum)
    return ok


def boolean(v: Any) -> bool:
    return isinstance(v, bool)


def text(unset_ok: bool = False) -> Check:
    def ok(v: Any) -> bool:
        return (unset_ok and v is None) or (isinstance(v, str) and v != "")
    return ok


def mapping_or_json(v: Any) -> bool:
    if v is None or isinstance(v, Mapping):
        return True
    if isinstance(v, str):
        try:
            return isinstance(json.loads(v), Mapping)
        except json.JSONDecodeError:
            return False
    return False


# The settings of the built-in state providers, by type (squall.state.providers): a wrong type
# fails the configuration check instead of the first task that opens a state.
_PROVIDER_CONFIG = "topology.state.provider.config"
_PROVIDER_TEXT = ("dir", "host", "password", "prefix", "key_serializer", "value_serializer")
_PROVIDER_INTEGER = ("port", "database")
_PROVIDER_NUMBER = ("timeout", "retry_timeout")


def state_provider_config(v: Any) -> bool:
    """A mapping (or JSON object) of provider settings; a setting of the wrong type raises
    `ConfigError` naming it, which says more than the key's `allowed`. A setting given as None
    counts as not given (the Redis clients read `"password": None` as no password)."""
    if not mapping_or_json(v):
        return False
    settings = json.loads(v) if isinstance(v, str) else (v or {})
    for key, value in settings.items():
        if value is None:
            continue  # as if not given: the provider's default (no password, ...)
        if key in _PROVIDER_TEXT and not (isinstance(value, str | os.PathLike) and value != ""):
            wanted = "a directory (a non-empty string)" if key == "dir" else "a non-empty string"
        elif key in _PROVIDER_INTEGER and not integer(0)(value):
            wanted = "an integer >= 0"
        elif key in _PROVIDER_NUMBER and not positive_number()(value):
            wanted = "a positive number of seconds"
        else:
            continue
        raise ConfigError(f"{_PROVIDER_CONFIG}: {key!r} must be {wanted}, "
                          f"got {value!r}")
    return True


def fraction(v: Any) -> bool:
    return _is_number(v) and 0 < float(v) <= 1


_SECS = "a positive number of seconds"
_MS = "a positive integer number of milliseconds"
_ATTEMPTS = "a positive integer (unset: retry for ever)"

KEYS: dict[str, KeySpec] = {
    # Storm's keys that squall reads.
    "topology.message.timeout.secs": KeySpec(_SECS, positive_number()),
    "topology.enable.message.timeouts": KeySpec("true or false", boolean),
    "topology.acker.executors": KeySpec(
        "an integer >= 0 (0: acking off; unset: one per worker)", integer(0, unset_ok=True)),
    "topology.max.spout.pending": KeySpec(
        "a positive integer (0 or unset: no bound)", integer(0, unset_ok=True)),
    "topology.workers": KeySpec("a positive integer", integer(1)),
    "topology.debug": KeySpec("true or false", boolean),
    "topology.disable.loadaware.messaging": KeySpec("true or false", boolean),
    "topology.tick.tuple.freq.secs": KeySpec(
        "a positive number of seconds (0 or unset: no ticks)",
        positive_number(unset_ok=True, zero_ok=True)),
    "topology.stats.sample.rate": KeySpec("a number in (0, 1]", fraction),
    "topology.max.task.parallelism": KeySpec(
        "a positive integer (unset: no cap)", integer(1, unset_ok=True)),
    "topology.state.checkpoint.interval.ms": KeySpec(
        "a positive number of milliseconds (0 or unset: 1000)", integer(0, unset_ok=True)),
    "topology.state.provider": KeySpec(
        "a provider name: memory, durable, redis (unset: memory)", text(unset_ok=True)),
    _PROVIDER_CONFIG: KeySpec(
        "a mapping or a JSON object", state_provider_config),
    "topology.sleep.spout.wait.strategy.time.ms": KeySpec(
        "a number of milliseconds >= 0", positive_number(zero_ok=True)),
    "topology.trident.batch.emit.interval.millis": KeySpec(
        "an integer number of milliseconds >= 0", integer(0, unset_ok=True)),
    # Storm's windowed-bolt keys (set on a component by its with_window... calls).
    "topology.bolts.window.length.count": KeySpec("a positive integer", integer(1, True)),
    "topology.bolts.window.length.duration.ms": KeySpec(_MS, integer(1, True)),
    "topology.bolts.window.sliding.interval.count": KeySpec("a positive integer",
                                                             integer(1, True)),
    "topology.bolts.window.sliding.interval.duration.ms": KeySpec(_MS, integer(1, True)),
    "topology.bolts.tuple.timestamp.field.name": KeySpec("a field name", text(unset_ok=True)),
    "topology.bolts.tuple.timestamp.max.lag.ms": KeySpec(
        "an integer number of milliseconds >= 0", integer(0, unset_ok=True)),
    "topology.bolts.watermark.event.interval.ms": KeySpec(
        "an integer number of milliseconds >= 0 (0: with every tuple)", integer(0, True)),
    "topology.bolts.late.tuple.stream": KeySpec("a stream name", text(unset_ok=True)),
    "topology.bolts.message.id.field.name": KeySpec("a field name", text(unset_ok=True)),
    # squall's own keys.
    "squall.random.seed": KeySpec("an integer", integer(unset_ok=True)),
    "squall.window.timestamp.errors.fatal": KeySpec("true or false", boolean),
    "squall.window.persistent": KeySpec("true or false", boolean),
    "squall.window.source.watermarks": KeySpec("true or false", boolean),
    "squall.window.max.events.in.memory": KeySpec("a positive integer", integer(1, True)),
    "squall.transactional.max.attempts": KeySpec(_ATTEMPTS, integer(1, unset_ok=True)),
    "squall.transactional.progress_store": KeySpec(
        "{'dir': path} or {'redis': {host, port, ...}}",
        lambda v: v is None or (isinstance(v, Mapping) and bool({"dir", "redis"} & set(v)))),
    "squall.transactional.inband": KeySpec("true or false (set by the Spark runner)", boolean),
    "squall.trident.max.attempts": KeySpec(_ATTEMPTS, integer(1, unset_ok=True)),
    "squall.trident.spark.partial.aggregation": KeySpec("true or false", boolean),
    "squall.trident.spark.state.in.executors": KeySpec("true or false", boolean),
    "squall.trident.spark.driver.combine.partitions": KeySpec("an integer >= 0", integer(0)),
    "squall.trident.state.partitions": KeySpec(
        "a positive integer (unset: 8 for a new state; a state keeps the number it was "
        "created with)", integer(1, unset_ok=True)),
    "squall.spark.trigger.ms": KeySpec(
        "an integer number of milliseconds >= 0 (0: as fast as possible)",
        integer(0, unset_ok=True)),
    "squall.spark.batch.max.tuples": KeySpec("a positive integer", integer(1, unset_ok=True)),
    "squall.spark.spouts": KeySpec(
        '"reader" (default: user spouts run on the driver, in the source\'s reader) or '
        '"executors" (each spout task pulled on an executor)',
        lambda v: v is None or v in ("reader", "executors")),
    "squall.spark.plan.ahead": KeySpec("true or false", boolean),
    "squall.spark.batch.max.attempts": KeySpec(_ATTEMPTS, integer(1, unset_ok=True)),
    "squall.spark.fusion": KeySpec("true or false", boolean),
    "squall.spark.batch.retry.backoff.ms": KeySpec(
        "an integer number of milliseconds >= 0", integer(0, unset_ok=True)),
    "squall.local.batch.ms": KeySpec(_MS, integer(1, unset_ok=True)),
    # Retries of failed trees and the dead-letter stream (docs/design/poison-tuples.md).
    "squall.retry.max.retries": KeySpec("an integer >= 0 (unset: replay for ever)",
                                        integer(0, unset_ok=True)),
    "squall.retry.initial.delay.ms": KeySpec(
        "an integer >= 0 of ms: the wait before a failed message's first replay (default 100, "
        "as Storm's Kafka spout backs off; 0: replayed at once, Storm's timing of `fail`)",
        integer(0, True)),
    "squall.retry.multiplier": KeySpec(
        "a number >= 1: each further wait is this many times the last (default 2)",
        lambda v: v is None or (_is_number(v) and float(v) >= 1)),
    "squall.retry.max.delay.ms": KeySpec(
        "an integer >= 0 of ms: the longest wait between replays (default 10000)",
        integer(0, True)),
    # Source partitions' watermarks (squall.partition_watermarks).
    "squall.watermark.idle.timeout.ms": KeySpec(
        "an integer number of milliseconds >= 0 (unset: a partition never counts as idle)",
        integer(0, unset_ok=True)),
    "squall.source.event.time.field": KeySpec(
        "the name of a field of the source's stream holding the event time (ms since the "
        "epoch); unset: the builder takes the downstream operators' timestamp field",
        lambda v: v is None or (isinstance(v, str) and bool(v))),
}

# What each key of `KEYS` does, in one sentence (the configuration reference prints it beside
# what the key allows).
MEANINGS: dict[str, str] = {
    "topology.message.timeout.secs":
        "How long a spout's tuple tree may take to complete before it is failed and replayed.",
    "topology.enable.message.timeouts":
        "Whether tuple trees time out at all (false: a tree is failed only when a bolt fails it).",
    "topology.acker.executors":
        "How many acker ledgers track tuple trees; 0 turns acking off, so spouts' tuples are "
        "acked as soon as they are emitted.",
    "topology.max.spout.pending":
        "How many of a spout task's tuples may be pending (emitted, not yet acked or failed) "
        "before it is asked for more.",
    "topology.workers":
        "Storm's number of worker processes; in squall it only sets how many acker ledgers the "
        "local runner keeps when topology.acker.executors is unset.",
    "topology.debug":
        "Storm's switch to log every emitted tuple; squall checks it and keeps it in the "
        "configuration, and logs nothing more for it.",
    "topology.disable.loadaware.messaging":
        "Storm's switch from its load- and locality-aware shuffle to a plain one: true makes a "
        "shuffle grouping between components with as many tasks spread each task's tuples over "
        "all the target's tasks; unset or false, task i sends to the target's task i, as "
        "local_or_shuffle does, and on Spark the target runs in its upstream's stage.",
    "topology.tick.tuple.freq.secs":
        "The period of the tick tuples sent to every bolt (a component's own value overrides).",
    "topology.stats.sample.rate":
        "The fraction of tuples whose latencies are timed for the metrics (Storm's sampling).",
    "topology.max.task.parallelism":
        "A cap on every component's number of tasks.",
    "topology.state.checkpoint.interval.ms":
        "How often a stateful topology checkpoints its state (prepare and commit) on the local "
        "runner; on Spark every micro-batch commits.",
    "topology.state.provider":
        "Where the state of stateful bolts and operators is kept: in task snapshots (memory), "
        "in files under the checkpoint location (durable), or in Redis.",
    _PROVIDER_CONFIG:
        "The state provider's settings (a durable provider's dir; Redis host, port, password, "
        "database, prefix, timeouts, serializers).",
    "topology.sleep.spout.wait.strategy.time.ms":
        "How long the local runner waits before asking a spout again after it emitted nothing.",
    "topology.trident.batch.emit.interval.millis":
        "The least time between the starts of two Trident batches on the local runner "
        "(Storm's throttle); on a simulated clock, also what each transaction of a "
        "transactional topology takes.",
    "topology.bolts.window.length.count":
        "A windowed bolt's window length in tuples (set by with_window).",
    "topology.bolts.window.length.duration.ms":
        "A windowed bolt's window length in milliseconds (set by with_window).",
    "topology.bolts.window.sliding.interval.count":
        "How many tuples a windowed bolt's window slides by (set by with_window).",
    "topology.bolts.window.sliding.interval.duration.ms":
        "How many milliseconds a windowed bolt's window slides by (set by with_window).",
    "topology.bolts.tuple.timestamp.field.name":
        "The field holding a windowed bolt's event time; set, its windows are in event time.",
    "topology.bolts.tuple.timestamp.max.lag.ms":
        "How far behind the largest timestamp seen a windowed bolt's watermark stays, so "
        "tuples up to this much out of order are not late.",
    "topology.bolts.watermark.event.interval.ms":
        "How often a windowed bolt's watermark is computed (0: with every tuple).",
    "topology.bolts.late.tuple.stream":
        "The stream a windowed bolt routes late tuples to (unset: they are counted and logged).",
    "topology.bolts.message.id.field.name":
        "The field that identifies a tuple across replays, which a stateful windowed bolt "
        "without persistence uses to recognise tuples it already has.",
    "squall.random.seed":
        "The seed of every random choice (tuple ids, shuffle grouping's order), so runs repeat.",
    "squall.window.timestamp.errors.fatal":
        "Whether a tuple without a valid timestamp is an error of its windowed bolt's task "
        "(Storm's behaviour) instead of going to the window_errors stream.",
    "squall.window.source.watermarks":
        "Whether a windowed bolt takes its watermark from the upstream sources' partitions "
        "(each partition's own progress) instead of from the tuples it receives.",
    "squall.window.persistent":
        "Whether a stateful windowed bolt keeps its window's contents in its state (set by "
        "with_persistence).",
    "squall.window.max.events.in.memory":
        "With persistence: how many of a window's tuples stay in memory, the rest in state "
        "(set by with_max_events_in_memory).",
    "squall.transactional.max.attempts":
        "How many times a transactional topology's batch is tried before the run fails.",
    "squall.transactional.progress_store":
        "Where a transactional topology records its transactions' progress: a directory or a "
        "Redis server.",
    "squall.transactional.inband":
        "Set by the Spark runner: transactional commits are gated by the batch's done markers.",
    "squall.trident.max.attempts":
        "How many times a Trident batch is tried before the run fails.",
    "squall.trident.spark.partial.aggregation":
        "On Spark, whether Trident combiners combine in the Python worker before the shuffle "
        "(false sends every row, for measuring).",
    "squall.trident.spark.state.in.executors":
        "On Spark, whether Trident map states are updated in the executors, where their keys "
        "are (false: on the driver, for measuring).",
    "squall.trident.spark.driver.combine.partitions":
        "On Spark, up to how many partitions' partials of a built-in Trident combiner are "
        "combined on the driver (more are combined by Spark; default 16).",
    "squall.trident.state.partitions":
        "How many partitions a new Trident map state's keys are spread over.",
    "squall.spark.trigger.ms":
        "The Spark runner's micro-batch interval (0: the next batch starts when the last ends).",
    "squall.spark.batch.max.tuples":
        "At most this many spout tuples in one Spark micro-batch (file, memory and Kafka "
        "sources and spouts; a Redis stream source takes each stream's new entries whole, "
        "so for it the key caps the streams a batch reads); default 250000.",
    "squall.spark.spouts":
        "On Spark, where user spout tasks (Storm's spouts) run: reader (the default), in "
        "the streaming source's reader on the driver, which calls next_tuple before each "
        "batch; executors, each spout task pulled in a Spark task of the batch, in parallel, "
        "restored from its own snapshot (next_tuple must then be a function of the spout's "
        "state and its input to replay a batch exactly). Built-in sources are read on the "
        "executors either way.",
    "squall.spark.plan.ahead":
        "On Spark, whether the spouts' reader plans the next micro-batch while the current "
        "one runs, when the spouts had more tuples ready than a batch holds and no built-in "
        "source is read (default false: each batch planned after the last committed; the "
        "same results either way; a tree planned ahead waits a batch longer for its ack).",
    "squall.spark.batch.max.attempts":
        "How many times a Spark micro-batch that cannot commit is run before the run fails.",
    "squall.spark.fusion":
        "On Spark, whether a bolt whose only input is a local_or_shuffle or shuffle grouping "
        "from one bolt with as many tasks (task i sending to task i) runs in that bolt's "
        "stage, its tuples executed where they are emitted (default true; false: a stage per "
        "bolt, the same results).",
    "squall.spark.batch.retry.backoff.ms":
        "The first pause before a failed Spark micro-batch runs again (it doubles, up to 30 s).",
    "squall.local.batch.ms":
        "The local runner's batch length: how often batch ends (time triggers, sinks' writes, "
        "watermarks) happen.",
    "squall.retry.max.retries":
        "How many times a failed tuple tree is replayed before its tuple goes to the "
        "dead-letter stream.",
    "squall.retry.initial.delay.ms":
        "The wait before a failed tuple tree's first replay.",
    "squall.retry.multiplier":
        "How much each further wait between replays grows.",
    "squall.retry.max.delay.ms":
        "The longest wait between two replays of a failed tuple tree.",
    "squall.watermark.idle.timeout.ms":
        "How long a source partition may send nothing before the watermark stops waiting for "
        "it.",
    "squall.source.event.time.field":
        "The field of a partitioned source's records that holds their event time, which the "
        "source's watermark is taken from and its tuples carry downstream.",
}

# Storm's topology keys (storm-client's Config) that squall accepts and ignores, so a config
# ported from Storm runs; each draws one warning.
STORM_KEYS_WITHOUT_EFFECT = frozenset((
    "topology.acker.cpu.pcore.percent", "topology.acker.resources.offheap.memory.mb",
    "topology.acker.resources.onheap.memory.mb", "topology.auto.task.hooks",
    "topology.backpressure.check.millis", "topology.backpressure.enable",
    "topology.backpressure.wait.park.microsec",
    "topology.backpressure.wait.progressive.level1.count",
    "topology.backpressure.wait.progressive.level2.count",
    "topology.backpressure.wait.progressive.level3.sleep.millis",
    "topology.backpressure.wait.strategy", "topology.batch.flush.interval.millis",
    "topology.blobstore.map", "topology.bolt.wait.park.microsec",
    "topology.bolt.wait.progressive.level1.count", "topology.bolt.wait.progressive.level2.count",
    "topology.bolt.wait.progressive.level3.sleep.millis", "topology.bolt.wait.strategy",
    "topology.builtin.metrics.bucket.size.secs", "topology.classpath",
    "topology.classpath.beginning", "topology.component.cpu.pcore.percent",
    "topology.component.resources.map", "topology.component.resources.offheap.memory.mb",
    "topology.component.resources.onheap.memory.mb",
    "topology.enable.send.iconnection.metrics", "topology.enable.v2.metrics.tick",
    "topology.environment", "topology.error.throttle.interval.secs",
    "topology.event.logger.register", "topology.eventlogger.executors",
    "topology.eventlogger.max.retained.files", "topology.eventlogger.rotation.size.mb",
    "topology.executor.overflow.limit", "topology.executor.receive.buffer.size",
    "topology.fall.back.on.java.serialization", "topology.groups", "topology.isolate.machines",
    "topology.kryo.decorators", "topology.kryo.factory", "topology.kryo.register",
    "topology.localityaware.higher.bound", "topology.localityaware.lower.bound",
    "topology.logging.config", "topology.logging.sensitivity",
    "topology.max.error.report.per.interval", "topology.max.replication.wait.time.sec",
    "topology.metrics.consumer.cpu.pcore.percent", "topology.metrics.consumer.register",
    "topology.metrics.consumer.resources.offheap.memory.mb",
    "topology.metrics.consumer.resources.onheap.memory.mb", "topology.metrics.reporters",
    "topology.min.replication.count", "topology.multilang.log.handler",
    "topology.multilang.serializer", "topology.name", "topology.oci.image", "topology.priority",
    "topology.producer.batch.dynamic", "topology.producer.batch.size",
    "topology.ras.acker.executors.per.worker", "topology.ras.constraint.max.state.search",
    "topology.ras.constraint.max.time.secs", "topology.ras.constraints",
    "topology.ras.one.component.per.worker", "topology.ras.one.executor.per.worker",
    "topology.ras.order.executors.by.proximity.needs", "topology.readonly.groups",
    "topology.readonly.users", "topology.scheduler.favored.nodes", "topology.scheduler.strategy",
    "topology.scheduler.unfavored.nodes", "topology.serialized.message.size.metrics",
    "topology.shellbolt.max.pending", "topology.skip.missing.kryo.registrations",
    "topology.spout.recvq.skips", "topology.spout.wait.park.microsec",
    "topology.spout.wait.progressive.level1.count",
    "topology.spout.wait.progressive.level2.count",
    "topology.spout.wait.progressive.level3.sleep.millis", "topology.spout.wait.strategy",
    "topology.spread.components", "topology.state.kryo.register",
    "topology.state.synchronization.timeout.secs", "topology.stats.ewma.enable",
    "topology.stats.ewma.smoothing.factor", "topology.submitter.principal",
    "topology.submitter.user", "topology.subprocess.timeout.secs", "topology.tasks",
    "topology.testing.always.try.serialize", "topology.transactional.id",
    "topology.transfer.batch.size", "topology.transfer.buffer.size",
    "topology.trident.windowing.cache.tuple.limit", "topology.tuple.compression.enable",
    "topology.tuple.compression.max.decompressed.bytes", "topology.tuple.compression.threshold",
    "topology.tuple.serializer", "topology.upstream.feedback.enable",
    "topology.upstream.feedback.freq.secs", "topology.users",
    "topology.v2.metrics.tick.interval.seconds", "topology.version", "topology.worker.childopts",
    "topology.worker.gc.childopts", "topology.worker.logwriter.childopts",
    "topology.worker.max.heap.size.mb", "topology.worker.metrics",
    "topology.worker.nimbus.thrift.client.use.tls", "topology.worker.shared.thread.pool.size",
    "topology.worker.timeout.secs",
))

# Storm keys with a value squall checks (a ported config's typo is still caught) but that change
# nothing a topology does; each draws one warning saying what to use instead. `topology.workers`
# only sets how many acker ledgers the local runner keeps when `topology.acker.executors` is
# unset, which no result, metric or guarantee depends on.
STORM_KEYS_CHECKED_WITHOUT_EFFECT: dict[str, str] = {
    "topology.workers": "a component's tasks are its parallelism hint (or squall run "
                        "--parallelism), and on Spark executors and cores are spark.* keys",
}

# Namespaces whose keys squall owns: an unknown key there is a mistake, not the user's own.
RESERVED = ("topology.", "squall.")
# Keys handed to Spark as they are (the Spark runner sets them on its session).
PASSED_THROUGH = ("spark.",)


def check_key(key: Any) -> str | None:
    """Raise `ConfigError` for an unknown key of squall's; a warning for a Storm key it ignores.

    >>> check_key("myapp.window.size") is None
    True
    >>> check_key("topolgy.debug")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    squall.errors.ConfigError: unknown ... key 'topolgy.debug': did you mean 'topology.debug'?
    """
    if not isinstance(key, str):
        raise ConfigError(f"configuration keys must be strings, got {key!r}")
    if key in STORM_KEYS_CHECKED_WITHOUT_EFFECT:
        return (f"{key} is a Storm key that has no effect in squall (ignored): "
                f"{STORM_KEYS_CHECKED_WITHOUT_EFFECT[key]}")
    if key in KEYS or key.startswith(PASSED_THROUGH):
        return None
    if key in STORM_KEYS_WITHOUT_EFFECT:
        return f"{key} is a Storm key that has no effect in squall (ignored)"
    # In squall's namespaces any unknown key is a mistake, so a looser match is suggested;
    # elsewhere only a near miss of a known key is (anything else is the user's own key).
    reserved = key.startswith(RESERVED)
    close = difflib.get_close_matches(key, list(KEYS), n=1, cutoff=0.75 if reserved else 0.9)
    if not (reserved or close):
        return None
    hint = (f": did you mean {close[0]!r}?" if close else
            "; squall's keys are listed in squall.topology.config_keys.KEYS "
            "(a key of your own belongs under your own prefix, e.g. 'myapp.')")
    raise ConfigError(f"unknown configuration key {key!r}{hint}")


def check_value(key: str, value: Any) -> None:
    """Raise `ConfigError` naming the key, the value and what is allowed.

    >>> check_value("topology.message.timeout.secs", "ten")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    squall.errors.ConfigError: topology.message.timeout.secs must be a positive ..., got 'ten'
    """
    spec = KEYS.get(key)
    if spec is not None and not spec.ok(value):
        raise ConfigError(f"{key} must be {spec.allowed}, got {value!r}")


def check_config(conf: Mapping[str, Any] | None, *, where: str = "") -> list[str]:
    """Check every key and value of `conf`; return the warnings, raise on the first error.

    `where` says whose configuration it is ("component 'split'"), put before the message.
    """
    warnings: list[str] = []
    for key, value in (conf or {}).items():
        try:
            warning = check_key(key)
            check_value(key, value)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}" if where else str(exc)) from None
        if warning:
            warnings.append(f"{where}: {warning}" if where else warning)
    return warnings

