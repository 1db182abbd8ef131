"""`python -m tiledsl ...` is the same as the `tiledsl` console script."""

import sys

from tiledsl.cli import main

sys.exit(main())
