"""``python -m distsvm``: the ``distsvm`` command."""

import sys

from .cli import main

sys.exit(main())
