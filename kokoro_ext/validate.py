"""``python -m kokoro_ext.validate``: the command of kokoro_ext.tools.validate, at its usual name."""

import sys

from kokoro_ext.tools.validate import main

if __name__ == "__main__":
    sys.exit(main())
