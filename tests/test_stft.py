"""ExactSTFT against torch.stft/istft (kokoro's TorchSTFT), eager and compiled with TVM."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import tvm
from kokoro.custom_stft import CustomSTFT
from kokoro.istftnet import TorchSTFT
from tvm import relax
from tvm.relax.frontend.torch import from_exported_program

from kokoro_ext.build.export.stft import ExactSTFT

N_FFT, HOP = 20, 5  # Kokoro-82M's gen_istft_n_fft and gen_istft_hop_size


def rel_rms(a, b):
    return float(((a - b) ** 2).mean().sqrt() / (b**2).mean().sqrt())


@pytest.fixture
def signals():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 1000, generator=gen)
    magnitude = torch.rand(2, N_FFT // 2 + 1, 201, generator=gen) * 2
    phase = (torch.rand(2, N_FFT // 2 + 1, 201, generator=gen) - 0.5) * 6
    return x, magnitude, phase


def test_transform_matches_torch_stft(signals):
    x, _, _ = signals
    m_ref, p_ref = TorchSTFT(N_FFT, HOP, N_FFT).transform(x)
    m, p = ExactSTFT(N_FFT, HOP, N_FFT).transform(x)
    assert (m - m_ref).abs().max() <= 1e-6 * max(1.0, float(m_ref.abs().max()))
    # Compare angles on the circle: a value on the branch cut may be +pi or -pi.
    assert (torch.cos(p) - torch.cos(p_ref)).abs().max() <= 1e-5
    assert (torch.sin(p) - torch.sin(p_ref)).abs().max() <= 1e-5


def test_inverse_matches_torch_istft(signals):
    _, magnitude, phase = signals
    want = TorchSTFT(N_FFT, HOP, N_FFT).inverse(magnitude, phase)
    got = ExactSTFT(N_FFT, HOP, N_FFT).inverse(magnitude, phase)
    assert got.shape == want.shape
    assert (got - want).abs().max() <= 1e-6


def test_kokoro_custom_stft_is_not_an_option(signals):
    # Why ExactSTFT exists: kokoro's disable_complex path is far off torch.istft.
    _, magnitude, phase = signals
    want = TorchSTFT(N_FFT, HOP, N_FFT).inverse(magnitude, phase)
    theirs = CustomSTFT(N_FFT, HOP, N_FFT).inverse(magnitude, phase)
    n = min(theirs.shape[-1], want.shape[-1])
    assert rel_rms(theirs[..., :n], want[..., :n]) > 0.1
    assert rel_rms(ExactSTFT(N_FFT, HOP, N_FFT).inverse(magnitude, phase), want) < 1e-6


class _RoundTrip(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stft = ExactSTFT(N_FFT, HOP, N_FFT)

    def forward(self, x, magnitude, phase):
        m, p = self.stft.transform(x)
        return m, p, self.stft.inverse(magnitude, phase)


def test_compiled_with_tvm_matches_torch(signals):
    x, magnitude, phase = (t[:1] for t in signals)
    ep = torch.export.export(_RoundTrip(), (x, magnitude, phase))
    vm = relax.VirtualMachine(tvm.compile(from_exported_program(ep), target="llvm"), tvm.cpu())
    m, p, y = (o.numpy() for o in vm["main"](*[tvm.runtime.tensor(t.numpy()) for t in (x, magnitude, phase)]))
    ref = TorchSTFT(N_FFT, HOP, N_FFT)
    m_ref, p_ref = (t.numpy() for t in ref.transform(x))
    assert np.abs(m - m_ref).max() <= 1e-5
    assert np.abs(np.cos(p) - np.cos(p_ref)).max() <= 1e-5
    assert np.abs(y - ref.inverse(magnitude, phase).numpy()).max() <= 1e-6
