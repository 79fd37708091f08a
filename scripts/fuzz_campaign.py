"""Run a fuzz campaign against glow's backends, replay a reproduction, or print a campaign's table.

    python scripts/fuzz_campaign.py --out /tmp/fuzz --count 1000 --backends interpreter,cpu --jobs 2
    python scripts/fuzz_campaign.py --summary /tmp/fuzz
    python scripts/fuzz_campaign.py --replay /tmp/fuzz/repros/cpu/000123-crash

See docs/robustness.md ("The fuzzer"). Resumable: run the same command again to continue.
"""

from __future__ import annotations

import os
import sys

# one thread per child: the campaign shares the machine, and forking is safer without thread pools
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from glow_tools.fuzz.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
