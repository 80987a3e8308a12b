"""Raw IDX reading, packing and loading, on the real FashionMNIST files."""

import gzip
import json
import shutil

import numpy as np
import pytest

from trainer import data


def test_real_raw_files_have_expected_shapes_and_balance(fashion_mnist_dir):
    train, test = data.read_raw(fashion_mnist_dir)
    assert train.images.shape == (60_000, 28, 28) and train.images.dtype == np.uint8
    assert test.images.shape == (10_000, 28, 28)
    assert np.bincount(train.labels).tolist() == [6000] * 10
    assert np.bincount(test.labels).tolist() == [1000] * 10
    mean, _ = data.pixel_stats(train.images)
    assert round(mean, 4) == 0.2860


def _copy_raw(src, dst):
    for name, _ in data.RAW_FILES.values():
        shutil.copy(src / name, dst / name)


def test_truncated_file_is_named_in_the_error(fashion_mnist_dir, tmp_path):
    _copy_raw(fashion_mnist_dir, tmp_path)
    target = tmp_path / "t10k-labels-idx1-ubyte.gz"
    target.write_bytes(target.read_bytes()[:100])
    with pytest.raises(data.DataError, match="t10k-labels-idx1-ubyte.gz"):
        data.read_raw(tmp_path)


def test_wrong_content_fails_the_checksum(fashion_mnist_dir, tmp_path):
    _copy_raw(fashion_mnist_dir, tmp_path)
    labels = gzip.decompress((tmp_path / "train-labels-idx1-ubyte.gz").read_bytes())
    tampered = labels[:-1] + bytes([(labels[-1] + 1) % 10])
    (tmp_path / "train-labels-idx1-ubyte.gz").write_bytes(gzip.compress(tampered))
    with pytest.raises(data.DataError, match="train-labels.*checksum mismatch"):
        data.read_raw(tmp_path)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\x00\x00\x08\x99" + b"\x00" * 8, "bad IDX magic"),
        (b"\x00\x00\x08\x01\x00\x00\x00\x05" + b"\x01\x02", "header promises 13"),
        (b"\x00\x00\x08\x03\x00\x00\x00\x01\x00\x00\x00\x20\x00\x00\x00\x20", "32x32"),
        (b"\x00\x00", "too short"),
    ],
)
def test_malformed_idx_headers(tmp_path, payload, message):
    path = tmp_path / "bad.gz"
    path.write_bytes(gzip.compress(payload))
    with pytest.raises(data.DataError, match=message):
        data.read_idx(path)


def test_missing_files_list_every_place_searched(tmp_path, monkeypatch):
    monkeypatch.setenv(data.DATA_DIR_ENV, str(tmp_path / "env"))
    monkeypatch.setattr(data, "DEBIAN_DIR", tmp_path / "debian")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(data.DataError) as caught:
        data.find_raw_dir(download=False)
    message = str(caught.value)
    for place in ("env", "debian", "cache", "apt-get install dataset-fashion-mnist"):
        assert place in message


def test_explicit_directory_is_the_only_place_looked(fashion_mnist_dir, tmp_path, monkeypatch):
    monkeypatch.setenv(data.DATA_DIR_ENV, str(fashion_mnist_dir))
    shutil.copy(fashion_mnist_dir / "train-labels-idx1-ubyte.gz", tmp_path)
    with pytest.raises(data.DataError) as caught:
        data.find_raw_dir(tmp_path)
    assert str(caught.value).startswith(f"{tmp_path}: FashionMNIST raw files missing")
    assert "train-images-idx3-ubyte.gz" in str(caught.value)
    assert "train-labels-idx1-ubyte.gz" not in str(caught.value)


def test_lookup_order_prefers_the_explicit_directory(fashion_mnist_dir, tmp_path, monkeypatch):
    _copy_raw(fashion_mnist_dir, tmp_path)
    monkeypatch.setenv(data.DATA_DIR_ENV, str(fashion_mnist_dir))
    assert data.find_raw_dir(tmp_path) == tmp_path
    assert data.find_raw_dir() == fashion_mnist_dir


def test_pack_then_load_round_trips(fashion_mnist_dir, tmp_path):
    manifest = data.pack(tmp_path, fashion_mnist_dir, train_limit=500, test_limit=100)
    assert manifest["counts"] == {"train": 500, "test": 100}
    assert manifest["complete"] is False
    assert manifest["class_names"][9] == "Ankle boot"
    assert set(manifest["files"]) == {
        "train-images.npy",
        "train-labels.npy",
        "test-images.npy",
        "test-labels.npy",
    }
    loaded = data.load_packed(tmp_path)
    train, _ = data.read_raw(fashion_mnist_dir)
    np.testing.assert_array_equal(loaded.train.images, train.images[:500])
    assert isinstance(loaded.train.images, np.memmap)
    assert loaded.test.labels.dtype == np.int64
    assert json.loads((tmp_path / "manifest.json").read_text()) == manifest


def test_tampered_packed_array_is_rejected(packed_small, tmp_path):
    copy = tmp_path / "packed"
    shutil.copytree(packed_small, copy)
    images = np.load(copy / "test-images.npy")
    images[0, 0, 0] ^= 0xFF
    np.save(copy / "test-images.npy", images)
    with pytest.raises(data.DataError, match="test-images.npy: sha256 differs"):
        data.load_packed(copy)


def test_packed_dir_without_manifest_is_rejected(tmp_path):
    with pytest.raises(data.DataError, match="no manifest.json"):
        data.load_packed(tmp_path)


def test_load_reads_packed_or_raw(packed_small, fashion_mnist_dir):
    assert len(data.load(packed_small).train) == 4000
    assert len(data.load(fashion_mnist_dir).train) == 60_000
