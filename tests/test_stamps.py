"""Stamps of verified files (kokoro_ext.run.stamps): a file is hashed in full once, then
only while it is unchanged does its stamp spare the hash."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from kokoro_ext.run import artifacts, stamps

from manifests import example_manifest, stage_entry

NAME = "decoder.weights"


@pytest.fixture
def build(tmp_path, monkeypatch):
    """(directory, manifest) of a fake build with one listed file, and a count of hashes."""
    directory = tmp_path / "artifacts"
    directory.mkdir()
    (directory / NAME).write_bytes(b"weights " * 1000)
    entry = stage_entry("decoder", weights_sha256=artifacts.sha256(directory / NAME))
    manifest = example_manifest(stages={"decoder": entry})
    hashed = []
    real = artifacts.sha256
    monkeypatch.setattr(artifacts, "sha256", lambda path: hashed.append(path) or real(path))
    monkeypatch.setattr(stamps, "RACY_NS", 0)  # the files here are all just written
    monkeypatch.setattr(stamps, "stamps_path", lambda: tmp_path / "cache" / stamps.STAMPS)
    return directory, manifest, hashed


def _verify(build, **kwargs):
    directory, manifest, _ = build
    artifacts.verify(directory, manifest, [NAME], **kwargs)


def test_a_file_is_hashed_once_then_vouched_for_by_its_stamp(build):
    directory, _, hashed = build
    _verify(build)
    assert hashed == [directory / NAME]
    assert stamps.stamps_path().is_file()
    _verify(build)
    _verify(build)
    assert len(hashed) == 1
    _verify(build, trust_stamps=False)
    assert len(hashed) == 2


def test_a_changed_file_is_caught_even_with_its_old_mtime_and_size(build):
    directory, _, hashed = build
    path = directory / NAME
    _verify(build)
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[10] ^= 1
    with open(path, "r+b") as f:  # in place: the same inode and size
        f.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the old mtime
    assert path.stat().st_ino == before.st_ino and path.stat().st_size == before.st_size
    with pytest.raises(ValueError, match=rf"{NAME} does not match manifest.json.*rebuild with"):
        _verify(build)
    assert len(hashed) == 2


def test_a_replaced_file_is_caught(build):
    directory, _, _ = build
    _verify(build)
    (directory / NAME).unlink()
    (directory / NAME).write_bytes(b"other bytes " * 100)
    with pytest.raises(ValueError, match=rf"{NAME} does not match manifest.json"):
        _verify(build)


def test_a_stamp_for_another_file_does_not_vouch_for_this_one(build):
    directory, manifest, hashed = build
    _verify(build)
    record = json.loads(stamps.stamps_path().read_text())
    (stamp,) = record["files"].values()
    # another file, its bytes not the manifest's, under a stamp copied from the good one
    other = directory.parent / "other"
    other.mkdir()
    (other / NAME).write_bytes(b"not the weights")
    record["files"][os.path.realpath(other / NAME)] = stamp
    stamps.stamps_path().write_text(json.dumps(record))
    with pytest.raises(ValueError, match=rf"{NAME} does not match manifest.json"):
        artifacts.verify(other, manifest, [NAME])
    # nor does a stamp vouch for bytes the manifest does not expect
    assert not stamps.is_verified(directory / NAME, "f" * 64)


def test_a_copy_is_hashed_again(build):
    directory, manifest, hashed = build
    _verify(build)
    copy = shutil.copytree(directory, directory.parent / "copy")
    artifacts.verify(copy, manifest, [NAME])
    assert hashed == [directory / NAME, copy / NAME]


@pytest.mark.parametrize("cache", ["a file", "unreadable stamps", "no home"])
def test_a_cache_that_cannot_hold_stamps_means_hashing_every_time(build, tmp_path, monkeypatch, cache):
    directory, _, hashed = build
    if cache == "a file":  # the cache directory cannot be created: a file is in the way
        (tmp_path / "blocker").write_text("")
        monkeypatch.setattr(stamps, "stamps_path", lambda: tmp_path / "blocker" / stamps.STAMPS)
    elif cache == "unreadable stamps":
        stamps.stamps_path().parent.mkdir()
        stamps.stamps_path().write_text("{not json")
    else:
        monkeypatch.setattr(stamps.cache, "cache_dir", _no_home)
        monkeypatch.setattr(stamps, "stamps_path", _unpatched_stamps_path)
    _verify(build)
    _verify(build)
    assert len(hashed) == (1 if cache == "unreadable stamps" else 2)  # rewritten, then used
    with open(directory / NAME, "ab") as f:
        f.write(b"!")
    with pytest.raises(ValueError, match=rf"{NAME} does not match manifest.json"):
        _verify(build)


_unpatched_stamps_path = stamps.stamps_path


def _no_home():
    raise RuntimeError("Could not determine home directory.")


def test_a_file_written_just_now_is_not_stamped(build, monkeypatch):
    monkeypatch.setattr(stamps, "RACY_NS", 60 * 10**9)
    _verify(build)
    _verify(build)
    assert len(build[2]) == 2
    assert not stamps.stamps_path().exists()


def test_stamps_of_gone_files_are_dropped(build, tmp_path):
    directory, manifest, _ = build
    gone = tmp_path / "gone"
    shutil.copytree(directory, gone)
    artifacts.verify(gone, manifest, [NAME])
    shutil.rmtree(gone)
    _verify(build)
    files = json.loads(stamps.stamps_path().read_text())["files"]
    assert list(files) == [os.path.realpath(directory / NAME)]
