"""`python -m app.cli`: `sickbay`."""

import sys

from app.cli import main

sys.exit(main())
