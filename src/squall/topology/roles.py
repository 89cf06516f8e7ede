"""Component roles: how the task layer hosts a component, recorded when the topology is built.

A role is a property of the component's class (and, for a windowed operator, of how it was
built), read once by the builder and stored in the topology description (`ComponentSpec.role`),
so runners and the task layer never find it out by unpickling a component or probing its
attributes.

>>> is_stateful_role(STATEFUL_WINDOWED), is_stateful_role(RICH)
(True, False)
"""

from __future__ import annotations

from typing import Final

SPOUT: Final = "spout"
BASIC: Final = "basic"  # BasicBolt: acked after execute returns, failed on FailedException
RICH: Final = "rich"  # Bolt: acks and fails its input itself
WINDOWED: Final = "windowed"  # WindowedBolt: execute takes windows of tuples
STATEFUL: Final = "stateful"  # StatefulBolt: keyed state, checkpointed
STATEFUL_WINDOWED: Final = "stateful-windowed"  # StatefulWindowedBolt
OPERATOR: Final = "operator"  # a windowed operator of squall.windows: panes, triggers
STATEFUL_OPERATOR: Final = "stateful-operator"  # one built with stateful=True
COORDINATED: Final = "coordinated"  # a transactional topology's processing-phase bolt
COMMITTING: Final = "committing"  # a transactional topology's commit-phase bolt
# A Trident topology's nodes (squall.trident.plan): runners execute them as a plan, batch by
# batch, never as tasks of the task layer.
TRIDENT_SPOUT: Final = "trident-spout"
TRIDENT: Final = "trident"

BOLT_ROLES: Final = frozenset({
    BASIC, RICH, WINDOWED, STATEFUL, STATEFUL_WINDOWED, OPERATOR, STATEFUL_OPERATOR,
    COORDINATED, COMMITTING,
})
ROLES: Final = BOLT_ROLES | {SPOUT}

# Roles whose tasks keep state in the topology's state provider and take part in checkpoints.
_STATEFUL: Final = frozenset({STATEFUL, STATEFUL_WINDOWED, STATEFUL_OPERATOR})
# Roles whose execute takes windows (or panes) instead of single tuples.
_WINDOWED: Final = frozenset({WINDOWED, STATEFUL_WINDOWED, OPERATOR, STATEFUL_OPERATOR})


def is_stateful_role(role: str) -> bool:
    return role in _STATEFUL


def is_windowed_role(role: str) -> bool:
    return role in _WINDOWED
