"""`python -m demo` (what `make demo` runs)."""

import sys

from demo.story import main

sys.exit(main())
