"""`python -m app.sim.fleet simulate|serve ...`."""

import sys

from app.sim.fleet.cli import main

sys.exit(main())
