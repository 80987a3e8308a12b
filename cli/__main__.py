"""``python -m cli``: the ``fmnist`` command."""

import sys

from cli.main import main

sys.exit(main())
