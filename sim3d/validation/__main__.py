"""`python -m sim3d.validation [CSV] ...`: predicted vs published."""

import sys

from .published import main

sys.exit(main())
