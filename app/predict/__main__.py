"""`python -m app.predict train|evaluate|score|backtest|models ...`: `sickbay`, through the same tree."""

import sys

from app import cli

sys.exit(cli.main(sys.argv[1:]))
