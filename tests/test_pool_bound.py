"""kokoro_ext.run.runner.PoolBound: TVM's pooled allocator on a GPU emptied before it
would hold the buffers of more than ``shapes`` input lengths (a fake ``clear`` here; on a
GPU it is vm.builtin.memory_manager.clear)."""

from kokoro_ext.run.runner import PoolBound


def test_repeated_lengths_keep_the_pool():
    cleared = []
    pool = PoolBound(lambda: cleared.append(1), shapes=2)
    for _ in range(50):
        for key in [("text", (1, 12)), ("decoder", (1, 512, 40))]:
            pool.before_call(key)
    assert cleared == [] and pool.clears == 0


def test_new_lengths_past_the_bound_empty_the_pool_first():
    order = []
    pool = PoolBound(lambda: order.append("clear"), shapes=3)
    for length in range(10):
        pool.before_call(("decoder", (1, 512, length)))
        order.append(length)
    # three lengths share a pool; the fourth new one finds it emptied
    assert order == [0, 1, 2, "clear", 3, 4, 5, "clear", 6, 7, 8, "clear", 9]
    assert pool.clears == 3


def test_the_runtime_has_the_clear_it_calls():
    from kokoro_ext.run import native, runner

    native.load_runtime()
    pool = runner.gpu_pool()
    pool._clear()  # TVM's memory manager: frees what no tensor holds (nothing here)
    assert pool.shapes == 4
