"""``python -m kokoro_ext.say``: the command of kokoro_ext.run.say, at its usual name."""

import sys

if __name__ == "__main__":
    import gc
    import os

    # The imports leave next to no garbage, but allocate enough to set off some seventy
    # collections: 8 ms of every start.
    gc.disable()
    # A process that speaks once and exits.  numpy's OpenBLAS starts a thread per core
    # at import that spins for a tenth of a second, on a core that loading needs, and
    # nothing here multiplies matrices with numpy.  TVM's pool workers spin up to 300,000
    # yields after each task, and the exit waits for them to notice: 0.1-0.3 s after
    # the last stage; 20,000 keep them as busy between a stage's kernels (a few ms).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "20000")

    from kokoro_ext.run import prefer_runtime_library

    prefer_runtime_library()  # this process only speaks: no compiler library

from kokoro_ext.run.say import main  # noqa: E402

if __name__ == "__main__":
    gc.enable()
    code = main()
    gc.freeze()  # exit without the collector walking every object of the start (0.03 s)
    sys.exit(code)
