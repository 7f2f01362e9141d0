"""`python -m sapo_edge.cli`: the `sapo-edge` command."""

import sys

from . import main

sys.exit(main())
