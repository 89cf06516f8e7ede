"""The live web UI of a running topology (`squall run --ui`).

`UiServer` serves, from the driver process, one page (plain HTML, CSS and JavaScript shipped in
`squall/ui/static`, no build step) and the JSON it polls: the topology's picture as data
(`squall.visualize`'s graph and layout) and the latest `MetricsSnapshot` with live rates
(`squall.ui.rates`). Design: docs/design/web-ui.md.
"""

from __future__ import annotations

from squall.ui.rates import Rates
from squall.ui.server import TOKEN_HEADER, UiServer, topology_document

__all__ = ["TOKEN_HEADER", "Rates", "UiServer", "topology_document"]
