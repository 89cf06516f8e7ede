"""The Kafka Trident state, where docs and earlier versions' pickles name it; it lives with the
other Trident states, in `squall.trident.state.kafka`."""

from squall.trident.state.kafka import KafkaState, KafkaStateFactory, KafkaStateUpdater

__all__ = ["KafkaState", "KafkaStateFactory", "KafkaStateUpdater"]
