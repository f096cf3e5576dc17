"""`python -m app.sim.fleet simulate|serve|backfill ...`: `sickbay simulate [serve|backfill] ...`, the same
tree (`simulate` writes a dataset, as `sickbay simulate` with no part does)."""

import sys

from app import cli

argv = sys.argv[1:]
sys.exit(cli.main(["simulate", *(argv[1:] if argv[:1] == ["simulate"] else argv)]))
