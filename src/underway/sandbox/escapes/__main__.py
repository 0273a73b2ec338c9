"""``python -m underway.sandbox.escapes``: check this host's backends."""

import sys

from ._check import main

sys.exit(main())
