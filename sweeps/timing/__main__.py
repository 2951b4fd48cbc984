"""``python -m sweeps.timing CKPT ...``: the timing command (:mod:`sweeps.timing.cli`)."""

import sys

from sweeps.exits import freeze_at_exit
from sweeps.timing.cli import main

freeze_at_exit()
sys.exit(main())
