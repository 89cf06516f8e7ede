"""Storm's TridentReach, as a join of two streams: how many distinct people saw each URL.

    squall run examples/trident_reach.py:topology --runner local
    squall run examples/trident_reach.py:topology --checkpoint /tmp/reach
    python examples/trident_reach.py [local|spark]

Storm's TridentReach looks a URL's tweeters and their followers up in two static states. Here
both tables arrive as streams, batch by batch: `tweets` emits (url, tweeter) pairs and
`followers` (tweeter, follower) pairs, and each batch is a snapshot of both tables (batch 2:
"george" no longer tweeted foo.com/blog/1 and "sally" tweeted tech.backtype.com/blog/123).
Trident joins the two streams' tuples of the same batch on the tweeter, keeps each (url,
follower) once (`group_by([url, follower]).aggregate(One)`, Storm's `One`), counts the followers
per URL (`group_by([url]).aggregate(Count)`), prints `trident_reach: <url> -> <reach>` and
writes the reach into the `reach` map state (`MapPut`), whose final content is batch 2's.
"""

from __future__ import annotations

import sys
import tempfile

from squall import Config
from squall.trident import (
    CombinerAggregator,
    Consumer,
    Count,
    FixedBatchSpout,
    MapPut,
    TridentTopology,
)
from squall.trident.state import DurableMapState, StateType

# Storm's TridentReach data.
TWEETERS = {
    "foo.com/blog/1": ["sally", "bob", "tim", "george", "nathan"],
    "engineering.twitter.com/blog/5": ["adam", "david", "sally", "nathan"],
    "tech.backtype.com/blog/123": ["tim", "mike", "john"],
}
FOLLOWERS = {
    "sally": ["bob", "tim", "alice", "adam", "jim", "chris", "jai"],
    "bob": ["sally", "nathan", "jim", "mary", "david", "vivian"],
    "tim": ["alex"],
    "nathan": ["sally", "bob", "adam", "harry", "chris", "vivian", "emily", "jordan"],
    "adam": ["david", "carissa"],
    "mike": ["john", "bob"],
    "john": ["alice", "nathan", "jim", "mike", "bob"],
}
# The second snapshot of the tweets (as many pairs as the first: a batch has a fixed size).
TWEETERS_LATER = {
    "foo.com/blog/1": ["sally", "bob", "tim", "nathan"],
    "engineering.twitter.com/blog/5": ["adam", "david", "sally", "nathan"],
    "tech.backtype.com/blog/123": ["tim", "mike", "john", "sally"],
}
SNAPSHOTS = [TWEETERS, TWEETERS_LATER]
STATE = "reach"


def pairs(table: dict[str, list[str]]) -> list[list[str]]:
    return [[key, value] for key, values in table.items() for value in values]


class One(CombinerAggregator):
    """1 for any number of tuples (Storm's `One`): keeps each group once."""

    def init(self, tup):
        return 1

    def combine(self, a, b):
        return 1

    def zero(self):
        return 1


class PrintReach(Consumer):
    def accept(self, tup):
        print(f"trident_reach: {tup['url']} -> {tup['reach']}", flush=True)


def build() -> TridentTopology:
    tweet_rows = [row for snapshot in SNAPSHOTS for row in pairs(snapshot)]
    follower_rows = pairs(FOLLOWERS) * len(SNAPSHOTS)
    t = TridentTopology()
    tweets = t.new_stream("tweets", FixedBatchSpout(["url", "tweeter"], len(pairs(TWEETERS)),
                                                    *tweet_rows))
    followers = t.new_stream("followers", FixedBatchSpout(
        ["tweeter", "follower"], len(pairs(FOLLOWERS)), *follower_rows))
    (t.join(tweets, ["tweeter"], followers, ["tweeter"], ["tweeter", "url", "follower"])
     .name("join")
     .group_by(["url", "follower"]).aggregate(One(), ["one"]).name("distinct")
     .group_by(["url"]).aggregate(Count(), ["reach"]).name("count")
     .peek(PrintReach()).name("print")
     .partition_persist(DurableMapState.factory(StateType.TRANSACTIONAL), ["url", "reach"],
                        MapPut(), ["url", "reach"])
     .name(STATE))
    return t


def topology():
    return build().build(), Config()


def expected_reach() -> list[dict[str, int]]:
    """Each batch's reach per URL, computed without squall (URLs reaching nobody left out)."""
    out = []
    for snapshot in SNAPSHOTS:
        reach = {url: len({f for t in tweeters for f in FOLLOWERS.get(t, [])})
                 for url, tweeters in snapshot.items()}
        out.append({url: n for url, n in reach.items() if n})
    return out


def expected_lines() -> list[str]:
    return [f"trident_reach: {url} -> {n}" for batch in expected_reach()
            for url, n in batch.items()]


def main(runner: str = "local") -> None:
    import squall  # noqa: PLC0415

    checkpoint = tempfile.mkdtemp(prefix="squall-reach-")
    top, conf = topology()
    squall.run(top, conf, runner=runner, checkpoint_location=checkpoint)
    state = DurableMapState.factory(StateType.TRANSACTIONAL).make_state(STATE, checkpoint)
    reach = {key[0]: n for key, n in state.items()}
    state.close()
    assert reach == expected_reach()[-1], reach
    for url, n in sorted(reach.items()):
        print(f"trident_reach: final {url}: {n}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
