"""The elementwise converters (kokoro_ext.build.frontend.elementwise): accurate, NaN-preserving,
and lowered to loops without libm calls, so that LLVM vectorizes them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

from kokoro_ext.build.compiler import compile_module
from kokoro_ext.run.runner import StageRunner
from kokoro_ext.build.frontend import custom_convert_map


class Gelu(torch.nn.Module):
    """ALBERT's gelu_new."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * torch.pow(x, 3.0))))


def _run(module: torch.nn.Module, x: torch.Tensor) -> np.ndarray:
    (got,) = StageRunner(compile_module(module, (x,)).executable)(x)
    return got


def _lowered_calls(module: torch.nn.Module, x: torch.Tensor) -> str:
    """The TIR of ``module`` after legalization, as text."""
    mod = from_exported_program(
        torch.export.export(module, (x,)), custom_convert_map=custom_convert_map()
    )
    mod = relax.transform.LegalizeOps()(mod)
    funcs = [f for _, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    return "\n".join(f.script() for f in funcs)


def test_tanh_is_accurate_and_keeps_nan():
    x = torch.cat([torch.linspace(-12, 12, 200_001), torch.tensor([0.0, -0.0, 1e-8, float("inf"),
                                                                    -float("inf"), float("nan")])])
    got = _run(torch.nn.Tanh(), x)
    want = torch.tanh(x.double()).numpy()
    finite = np.isfinite(x.numpy())
    assert np.abs(got[finite] - want[finite]).max() <= 4e-7
    assert got[-3] == 1.0 and got[-2] == -1.0
    assert np.isnan(got[-1]), "a NaN input must stay NaN (the pipeline's finiteness check)"


@pytest.mark.parametrize("exponent", [2, 3, 4, 2.0, 3.0])
def test_small_integer_powers_are_multiplies(exponent):
    x = torch.randn(1000) * 10

    class Pow(torch.nn.Module):
        def forward(self, x):
            return torch.pow(x, exponent)

    np.testing.assert_allclose(_run(Pow(), x), torch.pow(x.double(), exponent).numpy(), rtol=1e-6)
    assert "T.pow" not in _lowered_calls(Pow(), x)


def test_other_powers_keep_the_importer_lowering():
    class Pow(torch.nn.Module):
        def forward(self, x):
            return torch.pow(x, 2.5)

    x = torch.rand(100) + 0.5
    np.testing.assert_allclose(_run(Pow(), x), torch.pow(x, 2.5).numpy(), rtol=1e-6)
    assert "T.pow" in _lowered_calls(Pow(), x)


def test_gelu_has_no_libm_call():
    x = torch.randn(4, 300) * 3
    np.testing.assert_allclose(_run(Gelu(), x), Gelu()(x.double()).numpy(), atol=1e-6)
    tir = _lowered_calls(Gelu(), x)
    assert "T.tanh" not in tir and "T.pow" not in tir
