"""``python -m kokoro_ext.build``: see kokoro_ext.build.cli."""

import sys

from kokoro_ext.build.cli import main

sys.exit(main())
