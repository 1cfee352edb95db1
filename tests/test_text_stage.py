"""Kokoro's text stage: equal to kokoro's own computation, padded or not, eager or compiled."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

from kokoro_ext.run import native
from kokoro_ext.build.export.text_stage import TextStage, durations_from_logits
from kokoro_ext.build.frontend import LSTM_BACKENDS, custom_convert_map
from kokoro_ext.build.model import build_model, random_voice, small_config
from kokoro_ext.build.backend.cpu.pipeline import get_default_pipeline as relax_pipeline

LLVM = tvm.target.Target({"kind": "llvm"})

TOKENS = [0, 50, 83, 54, 57, 16, 65, 57, 0]


@pytest.fixture(scope="module")
def model():
    native.load()
    return build_model(small_config(), seed=0)


def kokoro_reference(model, ids, ref_s):
    """d and the duration sum exactly as KModel.forward_with_tokens computes them."""
    n = ids.shape[1]
    input_lengths = torch.full((1,), n)
    text_mask = torch.gt(torch.arange(n)[None] + 1, input_lengths[:, None])
    with torch.no_grad():
        bert_dur = model.bert(ids, attention_mask=(~text_mask).int())
        d_en = model.bert_encoder(bert_dur).transpose(-1, -2)
        d = model.predictor.text_encoder(d_en, ref_s[:, 128:], input_lengths, text_mask)
        x, _ = model.predictor.lstm(d)
        duration = torch.sigmoid(model.predictor.duration_proj(x)).sum(axis=-1)
        t_en = model.text_encoder(ids, input_lengths, text_mask)
    return d, duration, t_en


def padded(bucket):
    ids = torch.zeros(1, bucket, dtype=torch.long)
    ids[0, : len(TOKENS)] = torch.LongTensor(TOKENS)
    return ids


@pytest.mark.parametrize("bucket", [len(TOKENS), 16])
def test_eager_stage_matches_kokoro(model, bucket):
    n = len(TOKENS)
    ref_s = random_voice()[n - 2]
    d_ref, dur_ref, t_ref = kokoro_reference(model, torch.LongTensor([TOKENS]), ref_s)
    with torch.no_grad():
        d, dur, t_en = TextStage(model).eval()(padded(bucket), torch.tensor([n]), ref_s[:, 128:])
    assert (d[:, :n] - d_ref).abs().max() <= 1e-5
    assert (dur[:, :n] - dur_ref).abs().max() <= 1e-5
    assert (t_en[:, :, :n] - t_ref).abs().max() <= 1e-5
    assert not dur[:, n:].any() and not d[:, n:].any() and not t_en[:, :, n:].any()


@pytest.mark.parametrize("backend", LSTM_BACKENDS)
@pytest.mark.parametrize("bucket", [16, 24])
def test_compiled_stage_matches_eager(model, bucket, backend):
    n = len(TOKENS)
    stage = TextStage(model).eval()
    style = random_voice()[n - 2][:, 128:]
    ids, lengths = padded(bucket), torch.tensor([n])
    ep = torch.export.export(stage, (ids, lengths, style))
    mod = from_exported_program(ep, custom_convert_map=custom_convert_map(backend))
    # the project's pipeline: the convolutions and products go to the native kernels
    executable = tvm.compile(mod, target=LLVM, relax_pipeline=relax_pipeline(LLVM))
    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(t.numpy()) for t in (ids, lengths, style)])
    with torch.no_grad():
        want = stage(ids, lengths, style)
    for got, ref in zip(out, want):
        assert np.abs(got.numpy() - ref.numpy()).max() <= 1e-4


def test_durations_are_rounded_and_at_least_one():
    duration = torch.tensor([0.2, 1.4, 2.6, 7.0, 0.0])
    assert durations_from_logits(duration, 4).tolist() == [1, 1, 3, 7]
    assert durations_from_logits(duration, 4, speed=2.0).tolist() == [1, 1, 1, 4]
