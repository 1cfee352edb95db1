"""Kokoro models from the shipped config: random weights, checkpoints, voices, offline."""

from __future__ import annotations

import pytest
import torch

from kokoro_ext.build.model import build_model, load_config, load_voice, random_voice, small_config

PARTS = ("bert", "bert_encoder", "predictor", "text_encoder", "decoder")


@pytest.fixture(scope="module")
def small_model():
    return build_model(small_config(), seed=0)


def _save_checkpoint(model, path, prefix=""):
    torch.save(
        {part: {prefix + k: v for k, v in getattr(model, part).state_dict().items()} for part in PARTS},
        path,
    )


def test_shipped_config_is_kokoro_82m():
    config = load_config()
    model = build_model(config)
    assert sum(p.numel() for p in model.parameters()) == 81_810_022
    assert len(config["vocab"]) == 114
    assert not model.training


def test_random_weights_are_deterministic_per_seed(small_model):
    again = build_model(small_config(), seed=0)
    other = build_model(small_config(), seed=1)
    for (name, a), b, c in zip(
        small_model.named_parameters(), again.parameters(), other.parameters()
    ):
        assert torch.equal(a, b), name
    assert any(not torch.equal(a, c) for a, c in zip(small_model.parameters(), other.parameters()))


@pytest.mark.parametrize("prefix", ["", "module."])
def test_checkpoint_round_trip(small_model, tmp_path, prefix):
    path = tmp_path / "kokoro.pth"
    _save_checkpoint(small_model, path, prefix)
    loaded = build_model(small_config(), weights=path, seed=123)
    for (name, a), b in zip(small_model.named_parameters(), loaded.parameters()):
        assert torch.equal(a, b), name


def test_checkpoint_for_another_config_is_refused(small_model, tmp_path):
    path = tmp_path / "small.pth"
    _save_checkpoint(small_model, path)
    with pytest.raises(ValueError, match=r"do not match the config \(part 'bert'\).*--config"):
        build_model(load_config(), weights=path)


def test_file_that_is_not_a_checkpoint_is_refused(tmp_path):
    path = tmp_path / "voice.pt"
    torch.save(torch.zeros(3), path)
    with pytest.raises(ValueError, match="not a kokoro-v1_0.pth style checkpoint"):
        build_model(small_config(), weights=path)
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="cannot read Kokoro weights"):
        build_model(small_config(), weights=garbage)


def test_voice_pack_shape_is_checked(tmp_path):
    good = tmp_path / "af_test.pt"
    torch.save(random_voice(3), good)
    assert torch.equal(load_voice(good), random_voice(3))
    bad = tmp_path / "bad.pt"
    torch.save(torch.zeros(510, 256), bad)
    with pytest.raises(ValueError, match=r"shape \[510, 1, 256\], got \[510, 256\]"):
        load_voice(bad)


def test_bad_config_file_is_refused(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"vocab": {}}')
    with pytest.raises(ValueError, match="not a Kokoro config: missing n_token"):
        load_config(path)
    with pytest.raises(ValueError, match="cannot read Kokoro config"):
        load_config(tmp_path / "missing.json")


def test_small_model_runs_in_pytorch(small_model):
    with torch.no_grad():
        audio, durations = small_model.forward_with_tokens(
            torch.LongTensor([[0, 50, 83, 54, 57, 0]]), random_voice()[4]
        )
    assert audio.ndim == 1 and audio.numel() == 600 * int(durations.sum())
    assert torch.isfinite(audio).all()
