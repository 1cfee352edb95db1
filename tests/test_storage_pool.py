"""The stage libraries' storage comes from the native pool (kokoro_ext.build.passes.memory,
cpp/src/storage.cc): the pass that sends R.vm.alloc_storage there, and the pool's reuse;
and the planner sizes storage the length sizes for the call's batch (exact_dynamic_sizes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
import tvm_ffi
from torch import nn
from torch.export import Dim
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from kokoro_ext.build.backend.gpu import pipeline as gpu_pipeline
from kokoro_ext.build.passes.memory import call_sized_storage, exact_dynamic_sizes, pooled_storage
from kokoro_ext.build.backend.cpu.pipeline import finalize_passes, get_default_pipeline
from kokoro_ext.run import kernels, native
from kokoro_ext.run.runner import StageRunner

LLVM = tvm.target.Target({"kind": "llvm"})


@pytest.fixture(scope="module")
def pool():
    native.load()

    class Pool:
        alloc = staticmethod(tvm_ffi.get_global_func(kernels.ALLOC_STORAGE))
        clear = staticmethod(tvm_ffi.get_global_func(kernels.STORAGE_POOL_CLEAR))

        @staticmethod
        def cached() -> tuple[int, int]:
            """(bytes, buffers) the pool holds for reuse."""
            stats = tvm_ffi.get_global_func(kernels.STORAGE_POOL_STATS)()
            return int(stats[0]), int(stats[1])

        def storage(self, nbytes: int):
            return self.alloc(tvm_ffi.Shape([nbytes]), tvm_ffi.dtype("uint8"))

    return Pool()


def test_host_storage_goes_to_the_pool():
    @I.ir_module
    class Before:
        @R.function(pure=False)
        def main(size: R.Shape(ndim=1)):
            a = R.vm.alloc_storage(size, R.prim_value(0), R.dtype("uint8"), R.str("global"))
            b = R.vm.alloc_storage(R.shape([64]), R.prim_value(-1), R.dtype("float32"), R.str("global"))
            return (a, b)

    @I.ir_module
    class Expected:
        @R.function(pure=False)
        def main(size: R.Shape(ndim=1)):
            a = R.call_packed(kernels.ALLOC_STORAGE, size, R.dtype("uint8"), ty_args=(R.Object,))
            b = R.call_packed(kernels.ALLOC_STORAGE, R.shape([64]), R.dtype("float32"), ty_args=(R.Object,))
            return (a, b)

    tvm.ir.assert_structural_equal(pooled_storage(Before), Expected)


def test_other_devices_and_scopes_keep_the_vm_allocator():
    @I.ir_module
    class Before:
        @R.function(pure=False)
        def main():
            a = R.vm.alloc_storage(R.shape([64]), R.prim_value(1), R.dtype("uint8"), R.str("global"))
            b = R.vm.alloc_storage(R.shape([64]), R.prim_value(0), R.dtype("uint8"), R.str("texture"))
            return (a, b)

    tvm.ir.assert_structural_equal(pooled_storage(Before), Before)


def test_pool_runs_right_after_lower_runtime_builtin():
    names = [p.info.name for p in finalize_passes(LLVM)]
    assert names[names.index("LowerRuntimeBuiltin") + 1] == "kokoro_ext.PooledStorage", names


def test_a_bound_beside_an_unbounded_dimension_is_dropped():
    """(b, 4, n) with b <= 16 and n unbounded: planned for b = 16 it is 16 times a batch-1
    call's tensor, and still sized at run time; b's bound goes.  m's stays: its tensors'
    storage is static."""

    @I.ir_module
    class Before:
        @R.function(pure=False)
        def main(x: R.Tensor(("b", "n"), "float32"), y: R.Tensor(("m",), "float32")):
            R.func_attr({"tir_var_upper_bound": {"b": 16, "m": 4}})
            b, n, m = T.int64(), T.int64(), T.int64()
            a = R.builtin.alloc_tensor(R.shape([b, 4, n]), R.dtype("float32"), R.prim_value(0))
            c = R.builtin.alloc_tensor(R.shape([m, 8]), R.dtype("float32"), R.prim_value(0))
            return (a, c)

    @I.ir_module
    class Expected:
        @R.function(pure=False)
        def main(x: R.Tensor(("b", "n"), "float32"), y: R.Tensor(("m",), "float32")):
            R.func_attr({"tir_var_upper_bound": {"m": 4}})
            b, n, m = T.int64(), T.int64(), T.int64()
            a = R.builtin.alloc_tensor(R.shape([b, 4, n]), R.dtype("float32"), R.prim_value(0))
            c = R.builtin.alloc_tensor(R.shape([m, 8]), R.dtype("float32"), R.prim_value(0))
            return (a, c)

    tvm.ir.assert_structural_equal(exact_dynamic_sizes(Before), Expected)


def test_bounds_of_static_storage_stay():
    @I.ir_module
    class Before:
        @R.function(pure=False)
        def main(x: R.Tensor(("b", "n"), "float32")):
            R.func_attr({"tir_var_upper_bound": {"b": 16}})
            b, n = T.int64(), T.int64()
            a = R.builtin.alloc_tensor(R.shape([b, 2 * b]), R.dtype("float32"), R.prim_value(0))
            c = R.builtin.alloc_tensor(R.shape([b * n]), R.dtype("float32"), R.prim_value(0))
            return (a, c)

    # (b * n) has no bound as a whole: the planner sizes it exactly already
    tvm.ir.assert_structural_equal(exact_dynamic_sizes(Before), Before)


def _storage_bytes(mod):
    """The size of ``main``'s one storage, as planned."""
    alloc_storage = tvm.ir.Op.get("relax.memory.alloc_storage")
    (binding,) = [b for b in mod["main"].body.blocks[0].bindings
                  if b.value.op.same_as(alloc_storage)]
    return binding.value.args[0].values[0]


def test_storage_the_length_sizes_is_planned_for_the_calls_batch():
    @I.ir_module
    class Before:
        @R.function(pure=False)
        def main(x: R.Tensor(("b", "n"), "float32")):
            R.func_attr({"tir_var_upper_bound": {"b": 16}})
            b, n = T.int64(), T.int64()
            a = R.builtin.alloc_tensor(R.shape([b, 4, n]), R.dtype("float32"), R.prim_value(0))
            _ = R.call_packed("fill", x, a, ty_args=(R.Tuple,))
            out = R.builtin.alloc_tensor(R.shape([b, 4, n]), R.dtype("float32"), R.prim_value(0))
            _1 = R.call_packed("copy", a, out, ty_args=(R.Tuple,))
            return out

    b, n = Before["main"].params[0].ty.shape.values
    plan = relax.transform.StaticPlanBlockMemory()
    # TVM's planner alone: every dimension at its bound, 16 * 4 * n floats
    tvm.ir.assert_structural_equal(_storage_bytes(plan(Before)), 256 * n)
    exact = _storage_bytes(plan(exact_dynamic_sizes(Before)))
    assert tvm.sym.analyzer.Analyzer().can_prove_equal(exact, 16 * b * n), exact


@pytest.mark.parametrize("finalize", [
    lambda: finalize_passes(LLVM),
    lambda: finalize_passes(LLVM, native_storage=False),
    lambda: gpu_pipeline.finalize_passes(LLVM),
], ids=["cpu", "cpu-vm-allocator", "gpu"])
def test_exact_sizes_run_right_before_the_planner(finalize):
    names = [p.info.name for p in finalize()]
    assert names[names.index("StaticPlanBlockMemory") - 1] == "kokoro_ext.ExactDynamicSizes", names


def test_call_sized_storage_plans_no_storage_at_the_bounds():
    """In a WebAssembly memory: (m, 8) with m <= 4 is planned at the call's m, as the
    unbounded (b, 4, n) is, not once at 4 * 8 floats."""

    @I.ir_module
    class Before:
        @R.function(pure=False)
        def main(y: R.Tensor(("m",), "float32")):
            R.func_attr({"tir_var_upper_bound": {"m": 4}})
            m = T.int64()
            c = R.builtin.alloc_tensor(R.shape([m, 8]), R.dtype("float32"), R.prim_value(0))
            _ = R.call_packed("fill", y, c, ty_args=(R.Tuple,))
            out = R.builtin.alloc_tensor(R.shape([m, 8]), R.dtype("float32"), R.prim_value(0))
            _1 = R.call_packed("copy", c, out, ty_args=(R.Tuple,))
            return out

    (m,) = Before["main"].params[0].ty.shape.values
    plan = relax.transform.StaticPlanBlockMemory()
    assert int(_storage_bytes(plan(exact_dynamic_sizes(Before)))) == 4 * 8 * 4  # static
    sized = call_sized_storage(Before)
    assert "tir_var_upper_bound" not in sized["main"].attrs
    assert tvm.sym.analyzer.Analyzer().can_prove_equal(_storage_bytes(plan(sized)), 32 * m)


def test_a_browser_build_plans_every_storage_for_the_call(monkeypatch):
    """The wasm target's pipeline: the VM's allocator and call-sized storage."""
    import kokoro_ext.build.backend.cpu.pipeline as cpu_pipeline
    from kokoro_ext.build.backend.browser import WASM

    names = [p.info.name for p in finalize_passes(LLVM, native_storage=False, bounded_storage=False)]
    assert names[names.index("StaticPlanBlockMemory") - 1] == "kokoro_ext.CallSizedStorage", names
    asked = []
    real = cpu_pipeline.finalize_passes
    monkeypatch.setattr(cpu_pipeline, "finalize_passes", lambda *a: asked.append(a[1:]) or real(*a))
    WASM.pipeline(cpu_pipeline.PipelineOptions())(tvm.IRModule())
    assert asked == [(False, False)], asked


def test_freed_buffer_serves_the_next_request_it_fits(pool):
    pool.clear()
    first = pool.storage(1_000_000)
    assert pool.cached() == (0, 0)
    del first
    held, count = pool.cached()
    assert count == 1 and 1_000_000 <= held <= 1_000_000 * 9 // 8
    second = pool.storage(900_000)  # fits in the freed one: taken from the pool
    assert pool.cached() == (0, 0)
    third = pool.storage(2_000_000)  # nothing cached: a new buffer
    del second
    assert pool.cached() == (held, 1)
    del third
    assert pool.cached()[1] == 2
    pool.clear()
    assert pool.cached() == (0, 0)


def test_a_request_no_cached_buffer_fits_releases_the_largest_cached_one(pool):
    """Longer inputs need larger buffers: the shorter input's buffer of the same tensor
    goes back to the system instead of holding its pages beside the new one."""
    pool.clear()
    small, medium = pool.storage(100_000), pool.storage(1_000_000)
    del small, medium
    assert pool.cached()[1] == 2
    large = pool.storage(3_000_000)  # fits neither: the 1 MB buffer is released, 100 kB kept
    held, count = pool.cached()
    assert count == 1 and 100_000 <= held <= 100_000 * 9 // 8
    del large


def test_bad_size_is_a_clear_error(pool):
    with pytest.raises(ValueError, match=r"kokoro_ext.alloc_storage: size must be \(nbytes,\)"):
        pool.alloc(tvm_ffi.Shape([-1]), tvm_ffi.dtype("uint8"))
    with pytest.raises(ValueError, match=r"kokoro_ext.alloc_storage: size must be \(nbytes,\)"):
        pool.alloc(tvm_ffi.Shape([4, 4]), tvm_ffi.dtype("uint8"))


class Smooth(nn.Module):
    def forward(self, x):
        return torch.tanh(x - x.mean(-1, keepdim=True)) * 2.0 + x


def test_compiled_stage_reuses_its_buffers_at_any_length(pool):
    frames = Dim("frames", min=1, max=8192)
    program = torch.export.export(Smooth(), (torch.randn(1, 64, 300),), dynamic_shapes=({2: frames},))
    mod = from_exported_program(program)
    runner = StageRunner(tvm.compile(mod, target=LLVM, relax_pipeline=get_default_pipeline(LLVM)))
    pool.clear()
    x = np.random.default_rng(0).standard_normal((1, 64, 5000)).astype("float32")
    for n in (5000, 5000, 3000, 4999):
        (got,) = runner(torch.from_numpy(x[:, :, :n]))
        xn = x[:, :, :n]
        np.testing.assert_allclose(got, np.tanh(xn - xn.mean(-1, keepdims=True)) * 2 + xn, atol=1e-5)
        if n == 5000:
            after_first = pool.cached()
    # The calls' buffers went back to the pool, and the shorter calls found theirs there.
    assert after_first[1] >= 1, after_first
    assert pool.cached()[1] == after_first[1], (after_first, pool.cached())
