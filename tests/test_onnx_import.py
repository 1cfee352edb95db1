"""The ONNX importer (kokoro_ext.build.model.onnx_import) on small exports the tests write.

The files (tests/onnx_exports.py) have the form of kokoro-onnx's Kokoro exports: int8
(ConvInteger, MatMulInteger, DynamicQuantizeLSTM, quantized embeddings; shared scales and
zero points) and float32, with path-named, node-named and anonymous initializers.  No
network: the small config, random weights.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from onnx import helper

from kokoro_ext.build.model import build_model, small_config
from kokoro_ext.build.model.onnx_import import import_onnx
from onnx_exports import effective, read_model, write_export, write_model


@pytest.fixture(scope="module")
def small_model():
    return build_model(small_config(), seed=3)


@pytest.fixture(scope="module", params=["int8", "float32"])
def export(request, small_model, tmp_path_factory):
    """(path, quantization step per parameter, form) of a small export of small_model."""
    path = tmp_path_factory.mktemp("onnx") / f"kokoro-small.{request.param}.onnx"
    steps = write_export(small_model, path, quantized=request.param == "int8")
    return path, steps, request.param


@pytest.fixture(scope="module")
def target():
    """A KModel of the small config to import into (import_onnx reads only its names and shapes)."""
    return build_model(small_config(), seed=99)


@pytest.fixture(scope="module")
def imported(export, target):
    return import_onnx(export[0], target)


def test_every_parameter_comes_back_within_the_quantization_step(export, imported, small_model):
    _, steps, form = export
    original = small_model.state_dict()
    assert set(imported.state_dict) == set(original)
    for key, step in steps.items():
        got, want = effective(imported.state_dict, key), effective(original, key)
        # round to nearest: half a step, plus float32 rounding of the folded weight norm
        tolerance = step / 2 * 1.001 + 1e-6 * float(want.abs().max() + 1)
        error = float((got - want).abs().max())
        assert error <= tolerance, f"{key}: error {error:.3g} > {tolerance:.3g} ({form})"
    assert imported.quantized == (form == "int8")
    # the float32 export gives the parameters back exactly (up to the weight norm's rounding)
    if form == "float32":
        bias = "decoder.decode.0.conv1.bias"
        assert torch.equal(imported.state_dict[bias], original[bias])


def test_every_initializer_and_parameter_is_accounted_for(export, imported, small_model):
    _, initializers = read_model(export[0])
    assert set(imported.placements) == set(initializers)
    state = small_model.state_dict()
    assert imported.from_onnx | set(imported.filled) == set(state)
    assert not imported.from_onnx & set(imported.filled)
    # only the parameters kokoro's output does not depend on are filled in
    instance_norm = {k for k in state if ".norm1.norm." in k or ".norm2.norm." in k or ".adain" in k and ".norm." in k}
    assert set(imported.filled) == instance_norm | {"bert.pooler.weight", "bert.pooler.bias"}
    roles = imported.roles()
    assert roles["derived"] == sum(1 for k in state if ".alpha" in k)  # 1 / alpha, checked
    assert roles["weight"] > 0 and roles["constant"] >= 6
    if export[2] == "int8":
        # zero points are shared between weights of equal zero point
        shared = [p for p in imported.placements.values() if p[0].role == "zero point" and len(p) > 1]
        assert shared
    assert "placed into" in imported.summary()


def test_node_named_and_anonymous_weights_are_placed_by_their_node(imported):
    by_name = imported.placements
    conv = next(
        n
        for n in by_name
        if n.startswith("/decoder/decoder/decode.0/Mul_") and not n.endswith(("_scale", "_zero_point"))
    )
    assert by_name[conv][0].role == "weight"
    assert by_name[conv][0].targets[0].startswith("decoder.decode.0.")
    f0 = [p.targets for n, ps in by_name.items() if n.startswith("/encoder/F0.1/Mul_") for p in ps]
    assert any(t[0].startswith("predictor.F0.1.") for t in f0)
    lstm = {p.targets[0] for ps in by_name.values() for p in ps if p.role == "weight" and ".weight_hh" in p.targets[0]}
    assert lstm == {
        "text_encoder.lstm.weight_hh_l0",
        "predictor.text_encoder.lstms.0.weight_hh_l0",
        "predictor.lstm.weight_hh_l0",
        "predictor.shared.weight_hh_l0",
    }
    query = [ps[0].targets for n, ps in by_name.items() if n.startswith("onnx::MatMul_") and ps[0].role == "weight"]
    assert ("bert.encoder.albert_layer_groups.0.albert_layers.0.attention.query.weight",) in query


def test_weight_norm_is_refolded_exactly(imported):
    state = imported.state_dict
    v, g = state["decoder.decode.0.conv1.weight_v"], state["decoder.decode.0.conv1.weight_g"]
    norm = v.double().pow(2).sum(dim=(1, 2), keepdim=True).sqrt()
    assert torch.allclose(g.double(), norm, rtol=1e-6)  # v is the folded weight, g its norm


def test_imported_weights_load_into_kmodel_and_run(imported):
    model = build_model(small_config(), seed=5)
    model.load_state_dict(imported.state_dict)
    with torch.no_grad():
        audio, durations = model.forward_with_tokens(torch.LongTensor([[0, 50, 83, 54, 0]]), torch.zeros(1, 256))
    assert torch.isfinite(audio).all() and audio.numel() == 600 * int(durations.sum())


def _edited(export, tmp_path, edit):
    nodes, inits = read_model(export[0])
    edit(nodes, inits)
    path = tmp_path / "edited.onnx"
    write_model(nodes, inits, path)
    return path


def test_an_initializer_that_cannot_be_placed_is_named(export, target, tmp_path):
    def add_mystery(nodes, inits):
        inits["/decoder/decoder/mystery/Mul_output_0"] = np.ones((8, 8, 3), np.float32)
        nodes.append(helper.make_node("Conv", ["x", "/decoder/decoder/mystery/Mul_output_0"], ["y"], name="/decoder/decoder/mystery/Conv"))
        inits["onnx::MatMul_9999_quantized"] = np.ones((4, 4), np.int8)  # an orphan int8 weight

    path = _edited(export, tmp_path, add_mystery)
    with pytest.raises(ValueError) as raised:
        import_onnx(path, target)
    message = str(raised.value)
    assert "(2 problems)" in message
    assert (
        "initializer /decoder/decoder/mystery/Mul_output_0 (float32 [8, 8, 3], used by "
        "/decoder/decoder/mystery/Conv) cannot be placed" in message
    )
    assert "initializer onnx::MatMul_9999_quantized (int8 [4, 4], used by nothing) cannot be placed" in message


def test_a_missing_parameter_is_named(export, target, tmp_path):
    def drop_conv_post(nodes, inits):
        name = next(n for n in inits if n.startswith("/decoder/decoder/generator/Mul_") and inits[n].shape[0] == 22)
        del inits[name]

    path = _edited(export, tmp_path, drop_conv_post)
    with pytest.raises(ValueError, match=r"KModel parameter decoder.generator.conv_post.weight_v \[22, 128, 7\] is in no initializer"):
        import_onnx(path, target)


def test_a_name_that_contradicts_its_node_is_refused(export, target, tmp_path):
    suffix = "_quantized" if export[2] == "int8" else ""
    zero = f"decoder.decoder.decode.0.norm1.fc.weight{suffix}"
    one = zero.replace("decode.0", "decode.1")

    def swap_names(nodes, inits):
        # each weight keeps its node but carries the other module's name
        inits[zero], inits[one] = inits[one], inits[zero]
        for node in nodes:
            node.input[:] = [{zero: one, one: zero}.get(i, i) for i in node.input]

    path = _edited(export, tmp_path, swap_names)
    with pytest.raises(ValueError, match=r"its name says decoder.decode.1.norm1.fc but its node \(/decoder/decoder/decode.0/norm1/fc/MatMul"):
        import_onnx(path, target)


def test_an_export_for_another_config_is_refused(export):
    from kokoro_ext.build.model import load_config

    with pytest.raises(ValueError, match=r"(?s)does not map onto Kokoro's KModel.*does not fit"):
        import_onnx(export[0], build_model(load_config()))


def test_a_file_that_is_not_onnx_is_refused(target, tmp_path):
    bad = tmp_path / "kokoro.onnx"
    bad.write_bytes(b"\x00not an onnx file" * 10)
    with pytest.raises(ValueError, match="cannot read ONNX model"):
        import_onnx(bad, target)
    with pytest.raises(ValueError, match="does not exist"):
        import_onnx(tmp_path / "missing.onnx", target)


def test_build_model_takes_an_onnx_file(export, small_model):
    model = build_model(small_config(), weights=export[0])
    key = "predictor.duration_proj.linear_layer.bias"
    assert torch.equal(model.state_dict()[key], small_model.state_dict()[key])


def test_the_fetched_int8_model_maps_completely():
    """The real kokoro-v1.0.int8.onnx, if `python -m kokoro_ext.build.fetch` put it in the cache
    (bootstrap.sh does; read from disk, no network)."""
    from kokoro_ext.build import fetch
    from kokoro_ext.run import cache
    from kokoro_ext.build.model import load_config

    path = cache.model_path()
    if not fetch.model_ok(path):
        pytest.skip(f"the real model is not in {cache.cache_dir()} (python -m kokoro_ext.build.fetch)")
    result = import_onnx(path, build_model(load_config()))
    assert result.quantized and result.initializers == 775
    assert len(result.from_onnx) == 546 and len(result.filled) == 142
    roles = result.roles()
    assert (roles["weight"], roles["derived"], roles["constant"]) == (192, 48, 70)
    # the text encoder's embedding: int8 table with one scale, placed by its name
    table = result.state_dict["text_encoder.embedding.weight"]
    assert table.shape == (178, 512) and table.abs().max() > 0
