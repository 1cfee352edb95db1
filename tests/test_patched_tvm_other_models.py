"""The patch series leaves TVM working for other models (no TVM checkout needed).

A fresh copy of the installed wheel (every patch reverted) is patched by upstream/apply.sh;
then, in that copy, tvm.topi.math must still be TVM's module (tvm.topi does
`from .math import *`, so a public name added to topi/math.py can replace it), and a small
PyTorch model whose legalization goes through topi.math (BatchNorm, softmax and its
fast-math form, float16 GELU) must compile with tvm.compile and match PyTorch.
upstream/check_upstream_tests.sh runs TVM's own tests for the same purpose, given a checkout.
"""

from __future__ import annotations

import subprocess
import textwrap

import pytest

from tvm_trees import copy_wheel, run_apply


@pytest.fixture(scope="module")
def fresh_patched_wheel(tmp_path_factory):
    """Interpreter for a copy of the wheel: series reverted, then applied by apply.sh."""
    site = tmp_path_factory.mktemp("fresh-patched") / "site"
    python = copy_wheel(site)
    revert = run_apply("--revert", python=python)
    assert revert.returncode == 0, revert.stdout + revert.stderr
    apply = run_apply(python=python)
    assert apply.returncode == 0, apply.stdout + apply.stderr
    assert apply.stdout.splitlines()[-1].startswith("applied "), apply.stdout  # from scratch
    return site, python


def _run(python, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(python), "-c", textwrap.dedent(code)], capture_output=True, text=True, check=False
    )


def test_topi_math_is_tvms_module(fresh_patched_wheel):
    site, python = fresh_patched_wheel
    result = _run(
        python,
        """
        import tvm
        print(tvm.__file__)
        print(tvm.topi.math.__name__, getattr(tvm.topi.math, "__file__", "built-in"))
        print(tvm.topi.math.sqrt is tvm.topi.sqrt)
        """,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    where, module, same = result.stdout.splitlines()
    assert where.startswith(str(site)), "the test must run on the patched copy"
    assert module.split()[0] == "tvm.topi.math", module
    assert module.split()[1] == str(site / "tvm" / "topi" / "math.py")
    assert same == "True"


MODEL = """
import numpy as np
import torch
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)

    def forward(self, x):
        y = torch.softmax(self.bn(self.conv(x)), dim=1)
        return y, torch.nn.functional.gelu(y.half() * 4 - 2)

torch.manual_seed(0)
model = Model().eval()
with torch.no_grad():  # running statistics that are not the identity
    model.bn.running_mean.uniform_(-1, 1)
    model.bn.running_var.uniform_(0.5, 2)
    model.bn.weight.uniform_(0.5, 1.5)
    model.bn.bias.uniform_(-0.5, 0.5)
x = torch.randn(2, 3, 8, 8)
mod = from_exported_program(torch.export.export(model, (x,)))
ops = {
    binding.value.op.name
    for block in mod["main"].body.blocks
    for binding in block.bindings
    if isinstance(binding.value, relax.Call) and isinstance(binding.value.op, tvm.ir.Op)
}
assert {"relax.nn.batch_norm", "relax.nn.softmax", "relax.nn.gelu"} <= ops, ops
if FAST_MATH:
    mod = relax.transform.FastMathTransform()(mod)
vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
softmax, gelu = vm["main"](tvm.runtime.tensor(x.numpy()))
with torch.no_grad():
    ref_softmax, ref_gelu = model(x)
assert gelu.numpy().dtype == np.float16
np.testing.assert_allclose(softmax.numpy(), ref_softmax.numpy(), rtol=1e-4, atol=1e-5)
np.testing.assert_allclose(
    gelu.numpy().astype("float32"), ref_gelu.float().numpy(), rtol=2e-3, atol=2e-3
)
print("ok", float(np.abs(softmax.numpy() - ref_softmax.numpy()).max()))
"""


@pytest.mark.parametrize("fast_math", [False, True], ids=["default", "fast-math"])
def test_batchnorm_softmax_float16_gelu_model_matches_pytorch(fresh_patched_wheel, fast_math):
    _, python = fresh_patched_wheel
    result = _run(python, f"FAST_MATH = {fast_math}\n" + MODEL)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    assert result.stdout.startswith("ok")
