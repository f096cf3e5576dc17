"""`python -m app.predict train|evaluate|score|backtest ...`."""

import sys

from app.predict.cli import main

sys.exit(main())
