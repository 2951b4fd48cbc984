"""``python -m sweeps.timing CKPT ...``: the timing command (:mod:`sweeps.timing.cli`)."""

import sys

from sweeps.timing.cli import main

sys.exit(main())
