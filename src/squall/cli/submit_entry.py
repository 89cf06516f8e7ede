"""The primary resource `squall submit` hands to spark-submit: runs `squall ARGS` in the driver.

spark-submit starts this file as a script (`python submit_entry.py run TARGET --runner spark ...`),
so Python puts this directory first on `sys.path`, where the CLI's own modules (`main`, `run`,
`target`, ...) would shadow a user's top-level modules of the same names. It is removed first.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]

    from squall.cli.main import main

    sys.exit(main(sys.argv[1:]))
