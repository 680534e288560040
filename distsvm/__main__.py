"""``python -m distsvm``: the ``distsvm`` command."""

import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while the command starts: one line (distsvm.cli.main)
    print("ERROR: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
