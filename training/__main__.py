"""``python -m training``: see :func:`training.cli.main`."""

import sys

from training.cli import main

sys.exit(main())
