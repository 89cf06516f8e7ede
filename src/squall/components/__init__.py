"""Component base classes, collectors, declarers and the topology context."""
