"""``python -m distsvm``: the ``distsvm`` command."""

import os
import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while the command starts: one line (distsvm.cli.main)
    print("ERROR: interrupted", file=sys.stderr, flush=True)
    os._exit(130)  # now: an exit that unwinds the half-done imports could still die of SIGINT

sys.exit(main())
