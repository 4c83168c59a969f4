"""``python -m starforge.launch --spec JOBSPEC [-- CMD ...]``: the launcher (:mod:`starforge.cluster.launcher`)."""

import sys

from starforge.cluster.launcher import main

if __name__ == "__main__":
    sys.exit(main())
