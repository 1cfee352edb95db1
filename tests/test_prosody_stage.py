"""Kokoro's F0/N stage over a padded frame bucket: equal to the unpadded kokoro computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

from kokoro_ext.run import native
from kokoro_ext.build.export.prosody_stage import ProsodyStage
from kokoro_ext.build.frontend import custom_convert_map
from kokoro_ext.build.model import build_model, random_voice, small_config
from kokoro_ext.build.backend.cpu.pipeline import get_default_pipeline as relax_pipeline

LLVM = tvm.target.Target({"kind": "llvm"})

FRAMES = 40


@pytest.fixture(scope="module")
def model():
    native.load()
    return build_model(small_config(), seed=0)


def inputs(bucket):
    gen = torch.Generator().manual_seed(0)
    en = torch.randn(1, 640, bucket, generator=gen)
    en[:, :, FRAMES:] = 100.0  # padding garbage must not reach the valid frames
    return en, torch.tensor([FRAMES]), random_voice()[5][:, 128:]


@pytest.mark.parametrize("bucket", [FRAMES, 48, 64])
def test_padded_stage_equals_unpadded_kokoro(model, bucket):
    en, lengths, style = inputs(bucket)
    with torch.no_grad():
        f0_ref, n_ref = model.predictor.F0Ntrain(en[:, :, :FRAMES], style)
        f0, n = ProsodyStage(model).eval()(en, lengths, style)
    assert (f0[:, : 2 * FRAMES] - f0_ref).abs().max() <= 1e-5
    assert (n[:, : 2 * FRAMES] - n_ref).abs().max() <= 1e-5
    assert not f0[:, 2 * FRAMES :].any() and not n[:, 2 * FRAMES :].any()


@pytest.mark.parametrize(
    "bucket,backend", [(48, "native"), (64, "native"), (48, "tir")]
)
def test_compiled_stage_matches_eager(model, bucket, backend):
    stage = ProsodyStage(model).eval()
    args = inputs(bucket)
    ep = torch.export.export(stage, args)
    mod = from_exported_program(ep, custom_convert_map=custom_convert_map(backend))
    # the project's pipeline: the convolutions and products go to the native kernels
    executable = tvm.compile(mod, target=LLVM, relax_pipeline=relax_pipeline(LLVM))
    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a.numpy()) for a in args])
    with torch.no_grad():
        want = stage(*args)
    for got, ref in zip(out, want):
        assert np.abs(got.numpy() - ref.numpy()).max() <= 1e-4
