"""The ONNX export bench/e2e.py measures ONNX Runtime with: same model, same results.

Each stage runs in ONNX Runtime and in PyTorch on the inputs the pipeline gives it (small
config, 10 phonemes), through kokoro_ext.tools.engines.  The source phase must agree on the
branch cut, which the exporter's own atan2 got wrong for thousands of points.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

from kokoro_ext.tools.engines import onnx_provider, torch_provider
from kokoro_ext.build.export.onnx import export_onnx
from kokoro_ext.build.model import build_model, random_voice, small_config
from kokoro_ext.run.manifest import Limits
from kokoro_ext.run.pipeline import synthesize_ids, voice_style
from kokoro_ext.build.stages import STAGES, Geometry
from kokoro_ext.tools.validate import compare, compare_spectrum

@pytest.fixture(scope="module")
def model():
    return build_model(small_config(), seed=0).eval()


def test_stages_in_onnx_runtime_match_pytorch(model, tmp_path):
    onnx, eager = onnx_provider(model, tmp_path, threads=1), torch_provider(model)
    results = []

    def both(name):
        got, want = onnx(name), eager(name)

        def run(**inputs):
            g, w = got(**inputs), want(**inputs)
            assert tuple(g) == tuple(w) == STAGES[name].outputs
            for out, a in g.items():
                assert np.isfinite(a).all(), (name, out)
                b = w[out]
                results.append(compare_spectrum(a, b) if out == "spectrum" else compare(out, a, b))
            return w

        return run

    ids = [0] + [10 + i % 30 for i in range(10)] + [0]
    style = voice_style(random_voice(0).numpy(), 10)
    synthesize_ids(both, Geometry.from_model(model), ids, style, Limits(12, 64), 1.0, seed=0)
    assert len(results) == 7
    for r in results:
        assert r.max_abs <= 1e-4, r
    spectrum = next(r for r in results if r.name == "source.spectrum")
    assert spectrum.note.endswith("0 branch-cut flips in the phase"), spectrum


def test_atan2_follows_torch_on_the_branch_cut(tmp_path):
    class Angle(torch.nn.Module):
        def forward(self, y, x):
            return torch.atan2(y, x)

    y = torch.tensor([0.0, 0.0, -0.5, 0.5, 0.0, 1.0, -1.0, 0.0])
    x = torch.tensor([-1.0, 1.0, -1.0, -1.0, 0.0, 0.0, 0.0, 2.0])
    path = export_onnx(Angle(), (y, x), tmp_path / "atan2.onnx", ["y", "x"], ["angle"])
    (got,) = ort.InferenceSession(str(path)).run(None, {"y": y.numpy(), "x": x.numpy()})
    np.testing.assert_allclose(got, torch.atan2(y, x).numpy(), atol=1e-6)
