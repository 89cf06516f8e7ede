"""Bolts several test modules share."""

from __future__ import annotations

from squall import Fields, StatefulBolt, Values, WindowedBolt


class RunningCount(StatefulBolt):
    """Counts records per `key` in its state and passes each record on as (id, key, running
    count): the last count per key is the state's total, so a record applied twice shows as a
    count past the true one. Shared by the resume and timeout tests."""

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        key = tup["key"]
        n = self.state.get(key, 0) + 1
        self.state.put(key, n)
        self.collector.emit(Values(tup["id"], key, n), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("id", "key", "n"))


class WordCount(StatefulBolt):
    """Counts each `word` in its state and emits (word, running count), anchored: the last count
    per word is the state's total. Shared by the state and Redis-outage tests."""

    def init_state(self, state):
        self.counts = state

    def execute(self, tup):
        n = self.counts.get(tup["word"], 0) + 1
        self.counts.put(tup["word"], n)
        self.collector.emit(Values(tup["word"], n), anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word", "count"))


class Describe(WindowedBolt):
    """Emits (start, end, values, new values, expired values) of each window, each tuple by
    its field `v`. Shared by the windowed-bolt tests."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, window):
        def vals(tuples):
            return [t["v"] for t in tuples]

        self.collector.emit(Values(window.start_timestamp, window.end_timestamp,
                                   vals(window.get()), vals(window.get_new()),
                                   vals(window.get_expired())))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("start", "end", "values", "new", "expired"))
