"""`python -m sapo_edge.cli`: the `sapo-edge` command."""

import sys

from . import main

if (
    __name__ == "__main__"
):  # importing the module (the portability check imports them all) runs nothing
    sys.exit(main())
