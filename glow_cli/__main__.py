"""``python -m glow_cli`` is the ``glow`` command."""

import sys

from glow_cli.main import main

sys.exit(main())
