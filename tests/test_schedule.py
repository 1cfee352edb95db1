"""The compile pipeline's additions: inlined elementwise chains, Snake's sin^2."""

from __future__ import annotations

import numpy as np
import torch
import tvm
from tvm import relax

from kokoro_ext.compiler import compile_module
from kokoro_ext.export.decoder_stage import sin_squared, snake
from kokoro_ext.schedule import relax_pipeline


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
    # blocks other than the function's root block
    return func.script().count("T.sblock(") - func.script().count('T.sblock("root")')


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
    from tvm.relax.frontend.torch import from_exported_program

    mod = relax_pipeline(target)(from_exported_program(exported))
    funcs = {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    chain = [f for name, f in funcs.items() if "sin" in name or "round" in name]
    assert chain, sorted(funcs)
    assert all(_blocks(f) <= 2 for f in chain), {n: _blocks(f) for n, f in funcs.items()}


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
