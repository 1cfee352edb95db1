"""near_fusion (kokoro_ext.build.passes.fusion): an elementwise producer first used far
down its block runs where it is written, unfused; one used nearby fuses as before; and
the wasm target's pipeline runs it right before FuseOps."""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import relax

from kokoro_ext.build.backend.cpu.pipeline import legalize_passes
from kokoro_ext.build.passes.fusion import near_fusion

LLVM = tvm.target.Target({"kind": "llvm"})
N = 64


def _module(gap: int) -> tvm.IRModule:
    """``out = (x + y) * w``, with ``gap`` elementwise steps on another tensor between the
    add and the product, legalized and annotated as FuseOps takes them."""
    builder = relax.BlockBuilder()
    spec = relax.TensorType([N], "float32")
    x, y, w, z = (relax.Var(name, spec) for name in "xywz")
    with builder.function("main", [x, y, w, z]):
        with builder.dataflow():
            a = builder.emit(relax.op.add(x, y))
            for _ in range(gap):
                z = builder.emit(relax.op.exp(relax.op.negative(z)))
            out = builder.emit_output(relax.op.add(relax.op.multiply(a, w), z))
        builder.emit_func_output(out)
    mod = builder.get()
    return tvm.transform.Sequential(
        [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern()])(mod)


def _called(mod: tvm.IRModule) -> list[str]:
    """The PrimFuncs ``main`` calls, in order."""
    names = []
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and isinstance(value.args[0], tvm.ir.GlobalVar):
                names.append(value.args[0].name_hint)
    return names


def _fused(mod: tvm.IRModule) -> tvm.IRModule:
    return tvm.transform.Sequential([relax.transform.FuseOps(), relax.transform.FuseTIR()])(mod)


def test_a_producer_used_far_down_runs_unfused():
    before = _module(gap=20)  # the add's first use: 41 bindings later
    after = near_fusion(32)(before)
    assert _called(after)[0] == "add_unfused" and _called(before)[0] == "add"
    assert int(after["add_unfused"].attrs["op_pattern"]) == 8  # opaque: FuseOps leaves it
    assert int(after["add"].attrs["op_pattern"]) <= 2  # the original, for the other add
    # unpassed, FuseOps puts the add in the one kernel of the product, after the chain;
    # passed, the add is a kernel of its own, first, and the rest fuse without it
    (alone,) = _called(_fused(before))
    assert alone.startswith("fused_add_"), alone
    first, rest = _called(_fused(after))
    assert first == "add_unfused" and rest.startswith("fused_tir_negative_"), rest


def test_a_producer_used_nearby_is_left_to_fuse():
    before = _module(gap=20)
    tvm.ir.assert_structural_equal(near_fusion(64)(before), before)
    near = _module(gap=2)
    tvm.ir.assert_structural_equal(near_fusion(32)(near), near)


def test_unfused_computes_the_same():
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(N).astype(np.float32) for _ in range(4)]
    outs = []
    for mod in (_module(20), near_fusion(32)(_module(20))):
        vm = relax.VirtualMachine(tvm.compile(_fused(mod), target=LLVM), tvm.cpu())
        outs.append(vm["main"](*[tvm.runtime.tensor(a) for a in args]).numpy())
    np.testing.assert_array_equal(outs[0], outs[1])
    z = args[3]
    for _ in range(20):
        z = np.exp(-z)
    np.testing.assert_allclose(outs[0], (args[0] + args[1]) * args[2] + z, rtol=1e-5)


def test_it_runs_right_before_fuse_ops_where_asked():
    names = [p.info.name for p in legalize_passes(LLVM, fusion_reach=32)]
    assert names[names.index("FuseOps") - 1] == "kokoro_ext.NearFusion", names
    assert "kokoro_ext.NearFusion" not in [p.info.name for p in legalize_passes(LLVM)]


def test_a_browser_build_fuses_near_only(monkeypatch):
    import kokoro_ext.build.backend.cpu.pipeline as cpu_pipeline
    from kokoro_ext.build.backend.browser import FUSION_REACH, WASM

    asked = []
    real = cpu_pipeline.legalize_passes
    monkeypatch.setattr(cpu_pipeline, "legalize_passes", lambda *a: asked.append(a[1:]) or real(*a))
    WASM.pipeline(cpu_pipeline.PipelineOptions())(tvm.IRModule())
    assert asked == [(False, FUSION_REACH)], asked


@pytest.mark.parametrize("reach", [-1, 0])
def test_a_reach_of_nothing_unfuses_every_producer_used_later(reach):
    after = near_fusion(reach)(_module(gap=2))
    assert _called(after)[0] == "add_unfused"
