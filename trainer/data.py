"""FashionMNIST on disk: find and verify the raw IDX files, pack them, load packed data.

The packed dataset is a directory of four ``.npy`` arrays plus ``manifest.json``
(format version, counts, sha256 of every file, class names, pixel mean/std). It is the
KFP ``Dataset`` artifact and what the trainer reads in a PyTorchJob pod.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CLASS_NAMES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
# Shoes are photographed facing one way (in 92-100 % of each class's training images the
# weight lies on the same side), so random flips leave them alone: a mirrored sneaker is an
# image the test set never shows (docs/benchmarks.md, "Accuracy of the default recipe").
ONE_WAY_CLASSES = ("Sandal", "Sneaker", "Ankle boot")
IMAGE_SIZE = 28
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
DATA_DIR_ENV = "FASHION_MNIST_DIR"

# SHA-256 of the *uncompressed* IDX bytes: the same for the upstream download and for
# Debian's re-headered gzip files.
RAW_FILES = {
    "train-images": (
        "train-images-idx3-ubyte.gz",
        "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    ),
    "train-labels": (
        "train-labels-idx1-ubyte.gz",
        "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    ),
    "test-images": (
        "t10k-images-idx3-ubyte.gz",
        "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    ),
    "test-labels": (
        "t10k-labels-idx1-ubyte.gz",
        "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
    ),
}
EXPECTED_COUNTS = {"train": 60_000, "test": 10_000}
IMAGES_MAGIC, LABELS_MAGIC = 2051, 2049


class DataError(ValueError):
    """Raw or packed data is missing, corrupt, or not what it claims to be."""


@dataclass(frozen=True)
class Split:
    """Images (uint8 [N, 28, 28]) and labels (int64 [N]) of one split."""

    images: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    def head(self, limit: int | None) -> Split:
        """The first ``limit`` examples (all of them when ``limit`` is None)."""
        if limit is None or limit >= len(self):
            return self
        return Split(self.images[:limit], self.labels[:limit])


@dataclass(frozen=True)
class Dataset:
    """Both splits plus the manifest that describes them."""

    train: Split
    test: Split
    manifest: dict


def default_cache_dir() -> Path:
    """Where downloads and packed copies go when no directory is given."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fmnist-pipeline"


def candidate_raw_dirs() -> list[Path]:
    """The directories searched for the raw files when none is given, in order."""
    candidates = []
    if os.environ.get(DATA_DIR_ENV):
        candidates.append(Path(os.environ[DATA_DIR_ENV]))
    candidates.append(DEBIAN_DIR)
    candidates.append(default_cache_dir() / "raw")
    return candidates


def _missing_raw_files(directory: Path) -> list[str]:
    return [name for name, _ in RAW_FILES.values() if not (directory / name).is_file()]


def find_raw_dir(data_dir: str | Path | None = None, download: bool = True) -> Path:
    """Locate the four raw files: ``data_dir``, else $FASHION_MNIST_DIR, Debian, cache, download.

    An explicit ``data_dir`` is the only place looked at: a wrong path is an error, not
    a cue to read other data.

    Raises:
        DataError: nothing found and the download failed or was not allowed; the
            message says where it looked and how to get the files.
    """
    how_to_get = (
        "Get them with `apt-get install dataset-fashion-mnist`, or point --data-dir or "
        f"${DATA_DIR_ENV} at a directory holding the four .gz files."
    )
    if data_dir:
        missing = _missing_raw_files(Path(data_dir))
        if not missing:
            return Path(data_dir)
        raise DataError(
            f"{data_dir}: FashionMNIST raw files missing: {', '.join(missing)}. " + how_to_get
        )
    candidates = candidate_raw_dirs()
    for directory in candidates:
        if not _missing_raw_files(directory):
            return directory
    problem = ""
    if download:
        try:
            return _download(default_cache_dir() / "raw")
        except Exception as exc:  # torchvision raises many kinds on a failed download
            problem = f"\nDownload with torchvision failed: {exc}"
    names = ", ".join(name for name, _ in RAW_FILES.values())
    searched = "\n".join(f"  - {path}" for path in candidates)
    raise DataError(
        f"FashionMNIST raw files not found ({names}). Looked in:\n{searched}{problem}\n"
        + how_to_get
    )


def _download(target: Path) -> Path:
    from torchvision.datasets import FashionMNIST

    with tempfile.TemporaryDirectory() as tmp:
        FashionMNIST(tmp, train=True, download=True)
        FashionMNIST(tmp, train=False, download=True)
        target.mkdir(parents=True, exist_ok=True)
        for name, _ in RAW_FILES.values():
            os.replace(Path(tmp) / "FashionMNIST" / "raw" / name, target / name)
    return target


def read_idx(path: Path, expected_sha256: str | None = None) -> np.ndarray:
    """Read one gzip IDX file into a uint8 array, checking magic, shape and checksum."""
    try:
        raw = gzip.decompress(path.read_bytes())
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise DataError(f"{path}: not a readable gzip file ({exc})") from exc
    if expected_sha256 and hashlib.sha256(raw).hexdigest() != expected_sha256:
        raise DataError(f"{path}: checksum mismatch (corrupt or not FashionMNIST)")
    if len(raw) < 8:
        raise DataError(f"{path}: too short for an IDX header")
    magic, count = struct.unpack(">II", raw[:8])
    if magic == IMAGES_MAGIC:
        rows, cols = struct.unpack(">II", raw[8:16])
        shape, offset = (count, rows, cols), 16
        if (rows, cols) != (IMAGE_SIZE, IMAGE_SIZE):
            raise DataError(f"{path}: images are {rows}x{cols}, expected 28x28")
    elif magic == LABELS_MAGIC:
        shape, offset = (count,), 8
    else:
        raise DataError(f"{path}: bad IDX magic {magic} (expected 2051 or 2049)")
    expected_bytes = offset + int(np.prod(shape))
    if len(raw) != expected_bytes:
        raise DataError(f"{path}: {len(raw)} bytes, header promises {expected_bytes}")
    return np.frombuffer(raw, dtype=np.uint8, offset=offset).reshape(shape)


def read_raw(raw_dir: Path, verify: bool = True) -> tuple[Split, Split]:
    """Read and check the four raw files of ``raw_dir`` into (train, test)."""
    arrays = {}
    for key, (name, sha) in RAW_FILES.items():
        arrays[key] = read_idx(raw_dir / name, sha if verify else None)
    splits = []
    for split in ("train", "test"):
        images, labels = arrays[f"{split}-images"], arrays[f"{split}-labels"]
        if len(images) != len(labels):
            raise DataError(f"{raw_dir}: {split} has {len(images)} images, {len(labels)} labels")
        if labels.max(initial=0) >= len(CLASS_NAMES):
            raise DataError(f"{raw_dir}: {split} labels outside 0-9")
        splits.append(Split(images, labels.astype(np.int64)))
    return splits[0], splits[1]


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pixel_stats(images: np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation of the pixels on the 0-1 scale."""
    scaled = images.reshape(len(images), -1).astype(np.float64) / 255.0
    return float(scaled.mean()), float(scaled.std())


def pack(
    out_dir: str | Path,
    raw_dir: str | Path | None = None,
    train_limit: int | None = None,
    test_limit: int | None = None,
) -> dict:
    """Write the packed dataset into ``out_dir`` and return its manifest.

    ``train_limit``/``test_limit`` keep only the first examples of a split (for tests
    and smoke runs); the manifest records that the data is a slice.
    """
    source = find_raw_dir(raw_dir)
    train, test = read_raw(source)
    train, test = train.head(train_limit), test.head(test_limit)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for split_name, split in (("train", train), ("test", test)):
        for kind, array in (("images", split.images), ("labels", split.labels)):
            filename = f"{split_name}-{kind}.npy"
            np.save(out / filename, np.ascontiguousarray(array))
            files[filename] = _sha256_file(out / filename)
    mean, std = pixel_stats(train.images)
    manifest = {
        "format_version": FORMAT_VERSION,
        "counts": {"train": len(train), "test": len(test)},
        "complete": len(train) == EXPECTED_COUNTS["train"] and len(test) == EXPECTED_COUNTS["test"],
        "files": files,
        "class_names": list(CLASS_NAMES),
        "pixel_mean": round(mean, 6),
        "pixel_std": round(std, 6),
        "source": str(source),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def is_packed(directory: str | Path) -> bool:
    """Whether ``directory`` holds a packed dataset (has a manifest)."""
    return (Path(directory) / MANIFEST).is_file()


def load_packed(packed_dir: str | Path, verify: bool = True) -> Dataset:
    """Memory-map a packed dataset, checking the manifest (and checksums if ``verify``)."""
    directory = Path(packed_dir)
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except FileNotFoundError as exc:
        raise DataError(f"{directory}: no {MANIFEST}; not a packed dataset") from exc
    except json.JSONDecodeError as exc:
        raise DataError(f"{directory / MANIFEST}: not valid JSON ({exc})") from exc
    if manifest.get("format_version") != FORMAT_VERSION:
        raise DataError(
            f"{directory / MANIFEST}: format_version {manifest.get('format_version')!r}, "
            f"this trainer reads {FORMAT_VERSION}"
        )
    splits = {}
    for split_name in ("train", "test"):
        arrays = []
        for kind in ("images", "labels"):
            path = directory / f"{split_name}-{kind}.npy"
            if not path.is_file():
                raise DataError(f"{path}: missing from the packed dataset")
            if verify and _sha256_file(path) != manifest["files"].get(path.name):
                raise DataError(f"{path}: sha256 differs from {MANIFEST} (corrupt file)")
            arrays.append(np.load(path, mmap_mode="r"))
        images, labels = arrays
        if images.shape[1:] != (IMAGE_SIZE, IMAGE_SIZE) or len(images) != len(labels):
            raise DataError(
                f"{directory}: {split_name} arrays have shapes {images.shape} and {labels.shape}"
            )
        if len(labels) != manifest["counts"][split_name]:
            raise DataError(
                f"{directory}: {split_name} has {len(labels)} examples, "
                f"manifest says {manifest['counts'][split_name]}"
            )
        splits[split_name] = Split(images, labels)
    return Dataset(splits["train"], splits["test"], manifest)


def load(data_dir: str | Path | None = None) -> Dataset:
    """Load a packed directory, or else read the raw files found from ``data_dir``."""
    if data_dir and is_packed(data_dir):
        return load_packed(data_dir)
    train, test = read_raw(find_raw_dir(data_dir))
    mean, std = pixel_stats(train.images)
    manifest = {"class_names": list(CLASS_NAMES), "pixel_mean": mean, "pixel_std": std}
    return Dataset(train, test, manifest)
