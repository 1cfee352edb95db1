"""The compile pipeline's additions: inlined elementwise chains, vectorized reductions,
Snake's sin^2."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

from kokoro_ext.build.compiler import compile_module
from kokoro_ext.build.export.decoder_stage import sin_squared, snake
from kokoro_ext.build.export.masked import masked_instance_norm
from kokoro_ext.build.passes.schedule import VectorizeReduction
from kokoro_ext.build.backend.cpu.pipeline import get_default_pipeline


def test_sin_squared_matches_torch():
    x = torch.cat([torch.linspace(-20, 20, 100_001), torch.randn(100_000) * 1000])
    want = torch.sin(x.double()) ** 2
    assert (sin_squared(x).double() - want).abs().max() <= 5e-7


class AdaINSnake(torch.nn.Module):
    def forward(self, x, gamma, beta, alpha):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        y = (1 + gamma) * (x - mean) * torch.rsqrt(var + 1e-5) + beta
        return snake(y, alpha)


def _blocks(func) -> int:
    # blocks other than the root and the statistics' reductions ("x_red" and its rfactor parts)
    names = re.findall(r'T\.sblock\("([^"]+)"\)', func.script())
    return sum(1 for name in names if name != "root" and "_red" not in name)


def test_fused_elementwise_chain_is_one_loop_nest_and_exact():
    x, gamma, beta = torch.randn(1, 8, 300), torch.randn(1, 8, 1), torch.randn(1, 8, 1)
    alpha = torch.rand(1, 8, 1) + 0.5
    compiled = compile_module(AdaINSnake(), (x, gamma, beta, alpha))
    vm = relax.VirtualMachine(compiled.executable, tvm.cpu())
    got = vm["main"](*(tvm.runtime.tensor(a.numpy()) for a in (x, gamma, beta, alpha)))
    got = got[0] if not isinstance(got, tvm.runtime.Tensor) else got
    np.testing.assert_allclose(got.numpy(), AdaINSnake()(x, gamma, beta, alpha), atol=1e-5)

    # The pipeline up to TIR: the chain after the statistics must be a single block.
    target = tvm.target.Target({"kind": "llvm"})
    exported = torch.export.export(AdaINSnake(), (x, gamma, beta, alpha))
    mod = get_default_pipeline(target)(from_exported_program(exported))
    funcs = {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    chain = [f for name, f in funcs.items() if "sin" in name or "round" in name]
    assert chain, sorted(funcs)
    assert all(_blocks(f) == 1 for f in chain), {n: _blocks(f) for n, f in funcs.items()}


def test_functions_without_a_root_block_compile():
    # TVM's cumsum is an opaque "cumsum_generic" block with no root block to inline into
    class CumSum(torch.nn.Module):
        def forward(self, x):
            return torch.cumsum(x, dim=1) * 2.0 + 1.0

    x = torch.randn(1, 64, 9)
    compiled = compile_module(CumSum(), (x,))
    vm = relax.VirtualMachine(compiled.executable, tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.numpy()))
    got = got[0] if not isinstance(got, tvm.runtime.Tensor) else got
    np.testing.assert_allclose(got.numpy(), CumSum()(x).numpy(), atol=1e-5)


LLVM = tvm.target.Target({"kind": "llvm"})


def _prim_funcs(module: torch.nn.Module, *args: torch.Tensor) -> dict[str, tvm.tirx.PrimFunc]:
    """The module's PrimFuncs as the pipeline leaves them (scheduled, not lowered)."""
    mod = get_default_pipeline(LLVM)(from_exported_program(torch.export.export(module, args)))
    return {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}


def _run(module: torch.nn.Module, *args: torch.Tensor) -> np.ndarray:
    vm = relax.VirtualMachine(compile_module(module, args).executable, tvm.cpu())
    got = vm["main"](*(tvm.runtime.tensor(a.numpy()) for a in args))
    return (got if isinstance(got, tvm.runtime.Tensor) else got[0]).numpy()


class MaskedNorm(torch.nn.Module):
    """AdaIN's statistics: sum(x * mask, -1) and sum(((x - mean) * mask) ** 2, -1)."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = torch.nn.InstanceNorm1d(channels, affine=True)
        torch.nn.init.normal_(self.norm.weight)
        torch.nn.init.normal_(self.norm.bias)

    def forward(self, x, mask):
        return masked_instance_norm(self.norm, x, mask)


# 1001 is a multiple of no vector width, 256 of all of them
@pytest.mark.parametrize("frames", [1001, 256])
def test_masked_statistics_are_parallel_vectorized_and_exact(frames):
    torch.manual_seed(0)
    x = torch.randn(1, 32, frames) * 3 + 1
    mask = torch.ones(1, 1, frames)
    mask[..., frames - frames // 5 :] = 0
    module = MaskedNorm(32).eval()

    sums = {n: f.script() for n, f in _prim_funcs(module, x, mask).items() if "sum" in n}
    assert len(sums) >= 3, sorted(sums)  # the mask's count, the mean's sum, the variance's
    for name, script in sums.items():
        assert "T.parallel" in script and "T.vectorized" in script, name

    xd, md = x.double().numpy(), mask.double().numpy()
    mean = (xd * md).sum(-1, keepdims=True) / md.sum(-1, keepdims=True)
    var = (((xd - mean) * md) ** 2).sum(-1, keepdims=True) / md.sum(-1, keepdims=True)
    weight, bias = (p.detach().double().numpy()[None, :, None] for p in module.norm.parameters())
    want = (xd - mean) / np.sqrt(var + module.norm.eps) * weight + bias
    np.testing.assert_allclose(_run(module, x, mask), want, atol=1e-5)


def test_softmax_max_and_sum_are_vectorized_and_exact():
    class Softmax(torch.nn.Module):
        def forward(self, x):
            return torch.softmax(x, dim=-1)

    x = torch.randn(2, 3, 77) * 4
    (script,) = (f.script() for n, f in _prim_funcs(Softmax(), x).items() if "softmax" in n)
    assert script.count("T.vectorized") >= 4, script  # max and sum: init and update each
    assert script.count("T.parallel") == 2, script
    np.testing.assert_allclose(_run(Softmax(), x), torch.softmax(x.double(), -1), atol=1e-6)


def test_reductions_over_other_axes_are_left_alone():
    class ChannelMean(torch.nn.Module):
        def forward(self, x):
            return x.mean(1, keepdim=True) * 2.0 + x

    x = torch.randn(1, 24, 100)
    funcs = _prim_funcs(ChannelMean(), x)
    # one mixed function: the sum over channels, then (mean's divide) * 2 + x
    (mixed,) = (f for name, f in funcs.items() if "mean" in name)
    blocks = re.findall(r'T\.sblock\("([^"]+)"\)', mixed.script())
    assert blocks == ["root", "x_red", "T_add"], blocks
    assert "T.parallel" not in mixed.script() and "T.vectorized" not in mixed.script()
    assert VectorizeReduction().apply(mixed, LLVM, False) is None
    np.testing.assert_allclose(_run(ChannelMean(), x), ChannelMean()(x.double()), atol=1e-5)
