"""``python -m glow_core.cli`` is the ``glow`` command."""

import sys

from glow_core.cli.main import main

sys.exit(main())
