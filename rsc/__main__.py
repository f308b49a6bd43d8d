"""`python -m rsc ...` is `rsc ...`."""

import sys

from rsc.cli import main

sys.exit(main())
