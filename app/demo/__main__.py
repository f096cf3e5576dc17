"""`python -m app.demo`: see `app.demo.main`."""

import sys

from app.demo.main import main_demo

sys.exit(main_demo())
