"""``python -m queuestore``: the same as the ``queuestore`` command."""

import sys

from queuestore.ops.cli import main

sys.exit(main())
