"""The GPU pipeline's passes, before/expected, its schedule check, its kernels, and the
GPU targets' parsing and refusals (no GPU or browser needed: these compile only)."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

import cpu_tir
from kokoro_ext.build import gpu_pipeline
from kokoro_ext.build.gpu_target import CUDA, WEBGPU, gpu_target
from kokoro_ext.build.kernels.lstm_gpu import lstm_recurrence
from kokoro_ext.build.passes.gpu_schedule import check_scheduled, unscheduled_functions
from kokoro_ext.build.passes.narrow import bool_as_int32, narrow_integers
from kokoro_ext.build.passes.scan import compensated_cumsum, phase_scan
from kokoro_ext.build.target import parse_target

WEBGPU_TARGET = tvm.target.Target(dict(WEBGPU.target))


def test_narrow_integers_params_attributes_constants_and_sizes():
    @I.ir_module
    class Before:
        @R.function
        def main(lengths: R.Tensor(("b",), "int64"), x: R.Tensor(("b", "n"), "float32")):
            n = T.int64()
            with R.dataflow():
                steps = R.arange(0, n, 1, dtype="int64")
                doubled = R.multiply(lengths, R.const(2, "int64"))
                left = R.subtract(n - 1, steps)
                mask = R.less(R.expand_dims(steps, [0]), R.expand_dims(doubled, [1]))
                y = R.multiply(x, R.astype(mask, "float32"))
                R.output(y, left)
            return (y, left)

    @I.ir_module
    class Expected:
        @R.function
        def main(lengths: R.Tensor(("b",), "int32"), x: R.Tensor(("b", "n"), "float32")):
            n = T.int64()
            with R.dataflow():
                steps = R.arange(0, n, 1, dtype="int32")
                doubled = R.multiply(lengths, R.const(2, "int32"))
                left = R.subtract(T.Cast("int32", n - 1), steps)
                mask = R.less(R.expand_dims(steps, [0]), R.expand_dims(doubled, [1]))
                y = R.multiply(x, R.astype(mask, "float32"))
                R.output(y, left)
            return (y, left)

    tvm.ir.assert_structural_equal(narrow_integers(Before), Expected)


def test_narrow_integers_refuses_a_constant_past_int32():
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((2,), "int64")):
            with R.dataflow():
                y = R.add(x, R.const(2**40, "int64"))
                R.output(y)
            return y

    with pytest.raises(ValueError, match="does not fit in int32"):
        narrow_integers(Before)


def test_bool_as_int32_between_operators():
    @I.ir_module
    class Before:
        @R.function
        def main(a: R.Tensor((4,), "float32"), b: R.Tensor((4,), "float32")):
            with R.dataflow():
                mask = R.less(a, b)
                y = R.where(mask, a, b)
                R.output(y)
            return y

    @I.ir_module
    class Expected:
        @R.function
        def main(a: R.Tensor((4,), "float32"), b: R.Tensor((4,), "float32")):
            with R.dataflow():
                mask = R.less(a, b)
                stored = R.astype(mask, "int32")
                read = R.astype(stored, "bool")
                y = R.where(read, a, b)
                R.output(y)
            return y

    tvm.ir.assert_structural_equal(bool_as_int32(Before), Expected)


def _buffer_dtypes(func: tvm.tirx.PrimFunc) -> dict[str, str]:
    """Element dtype of each buffer parameter of ``func`` (this TVM's buffer parameters are
    Vars of BufferType; scalar parameters are left out)."""
    return {
        str(p.name): str(p.ty.dtype.dtype) for p in func.params
        if isinstance(p.ty, tvm.tirx.BufferType)
    }  # fmt: skip


def test_buffer_dtypes_sees_a_bool_buffer_parameter():
    @T.prim_func(private=True)
    def toy(m: T.Buffer((4,), "bool"), y: T.Buffer((4,), "float32"), k: T.int32):
        for i in range(4):
            y[i] = T.if_then_else(m[i], T.float32(k), T.float32(0))

    assert _buffer_dtypes(toy) == {"m": "bool", "y": "float32"}


def test_bool_as_int32_leaves_no_bool_buffer_between_kernels():
    @I.ir_module
    class Before:
        @R.function
        def main(a: R.Tensor(("n",), "float32"), b: R.Tensor(("n",), "float32")):
            with R.dataflow():
                mask = R.less(a, b)
                # a reduction and an elementwise kernel both read the mask: it is stored
                total = R.sum(R.astype(mask, "float32"))
                y = R.where(mask, R.add(a, total), b)
                R.output(y)
            return y

    def kernel_params(passes):
        with WEBGPU_TARGET:
            mod = tvm.transform.Sequential(
                [*passes, relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                 relax.transform.FuseOps(), relax.transform.FuseTIR()]  # fmt: skip
            )(Before)
        return {
            gvar.name_hint: _buffer_dtypes(func) for gvar, func in mod.functions.items()
            if isinstance(func, tvm.tirx.PrimFunc)
        }  # fmt: skip

    # without the pass the mask crosses kernels as bool: what the check below must catch
    assert any("bool" in d.values() for d in kernel_params([]).values())
    after = kernel_params([bool_as_int32])
    assert len(after) >= 2, after
    assert not any("bool" in d.values() for d in after.values()), after
    assert any("int32" in d.values() for d in after.values()), after  # it crosses as int32


def test_compensated_cumsum_rewrites_the_float64_running_sum():
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor(("b", "n", 9), "float32")):
            with R.dataflow():
                wide = R.astype(x, "float64")
                total = R.cumsum(wide, axis=1)
                y = R.astype(total, "float32")
                R.output(y)
            return y

    after = compensated_cumsum(Before)
    calls = [line for line in after["main"].script().splitlines() if "R.call_tir" in line]
    assert len(calls) == 1 and "phase_scan" in calls[0]
    assert "R.cumsum" not in after["main"].script()
    assert "float64" not in after["main"].script()


def test_compensated_cumsum_leaves_other_scans():
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor(("b", "n", 9), "float32")):
            with R.dataflow():
                total = R.cumsum(x, axis=2)
                R.output(total)
            return total

    tvm.ir.assert_structural_equal(compensated_cumsum(Before), Before)


def test_phase_scan_matches_a_float64_sum_rounded_once():
    # the kernel itself, compiled for the CPU with its thread loops serial: Neumaier's sum
    # of long phases; 3 x 25 rows and channels, more than one 64-thread group
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (3, 20000, 25)).astype(np.float32)
    x *= rng.uniform(0.5, 2, (3, 1, 25)).astype(np.float32)  # each (row, channel) its own
    out = cpu_tir.run(cpu_tir.cpu_function(phase_scan(), loops=2), x, out_shape=x.shape)
    exact = np.cumsum(x.astype(np.float64), axis=1).astype(np.float32)
    naive = np.cumsum(x, axis=1, dtype=np.float32)
    ulp = np.spacing(exact)
    assert np.max(np.abs(out - exact) / ulp) <= 1
    assert np.max(np.abs(naive - exact) / ulp) > 10  # what a plain float32 scan drifts by
    assert unscheduled_functions(tvm.IRModule({"phase_scan": phase_scan()})) == []


def test_check_scheduled_names_the_unscheduled_function():
    @I.ir_module
    class Mod:
        @T.prim_func(private=True)
        def add_one(a: T.Buffer((16,), "float32"), b: T.Buffer((16,), "float32")):
            for i in range(16):
                b[i] = a[i] + T.float32(1)

    # raised inside a pass, the error reaches Python through TVM's FFI as its message
    with pytest.raises(Exception, match="1 function.* no GPU schedule .* host code: add_one;"):
        check_scheduled(Mod)


@pytest.mark.parametrize("gpu", [WEBGPU, CUDA], ids=lambda g: g.name)
def test_every_function_of_a_dlight_scheduled_module_is_bound(gpu):
    @I.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor(("n", 64), "float32"), w: R.Tensor((64, 32), "float32")):
            with R.dataflow():
                y = R.sin(R.nn.relu(R.matmul(x, w)))
                R.output(y)
            return y

    target = tvm.target.Target(dict(gpu.target))
    with target:
        mod = tvm.transform.Sequential(gpu_pipeline.legalize_passes(target, gpu.pipeline))(Mod)
    assert unscheduled_functions(mod) == []


@pytest.mark.parametrize("hidden", [256, 640])
def test_lstm_recurrence_compiles_to_wgsl_with_its_barriers(hidden):
    # 640 units: more than one unit per thread (WebGPU's 256 threads a work group)
    func = lstm_recurrence(hidden, 2).with_attr("global_symbol", "lstm")
    lib = tvm.tirx.build(tvm.IRModule({"lstm": func}), target=WEBGPU_TARGET)
    source = lib.imports[0].inspect_source()
    assert source.count("workgroupBarrier()") == 3
    assert "@workgroup_size(256" in source
    assert "var<workgroup>" in source


def test_gpu_targets_parse():
    assert parse_target("webgpu") == dict(WEBGPU.target)
    assert parse_target('{"kind": "webgpu"}') == dict(WEBGPU.target)
    assert gpu_target(parse_target("webgpu")) is WEBGPU
    assert gpu_target(parse_target("llvm")) is None


def test_a_webgpu_build_refuses_a_cpu_precision():
    from kokoro_ext.build.cli import parse_args
    from kokoro_ext.build.driver import _products

    with pytest.raises(ValueError, match="--precision int8 is for CPUs"):
        _products(parse_args(["--target", "webgpu", "--precision", "int8"]))
