"""``python -m kokoro_ext.say``: the command of kokoro_ext.run.say, at its usual name."""

import sys

if __name__ == "__main__":
    from kokoro_ext.run import prefer_runtime_library

    prefer_runtime_library()  # this process only speaks: no compiler library

from kokoro_ext.run.say import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
