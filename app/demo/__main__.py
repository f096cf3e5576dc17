"""`python -m app.demo` (`make demo`): `sickbay demo`, through the same command tree."""

import sys

from app import cli

sys.exit(cli.main(["demo", *sys.argv[1:]]))
