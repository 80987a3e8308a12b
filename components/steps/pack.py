"""The ``pack-dataset`` step: the raw IDX files, checked, as the packed ``Dataset`` directory."""

from kfp import dsl
from kfp.dsl import Dataset, Output

from components.images import default_image


@dsl.component(base_image=default_image("components"), install_kfp_package=False)
def pack_dataset(train_limit: int, test_limit: int, dataset: Output[Dataset]):
    """Pack FashionMNIST into .npy arrays plus a manifest with checksums and pixel statistics.

    The raw files come from $FASHION_MNIST_DIR, /usr/share/datasets/fashion-mnist, the
    cache, or a download; their checksums are verified.

    Args:
        train_limit: Keep at most this many (the first) training examples.
        test_limit: Keep at most this many (the first) test examples.
        dataset: The packed dataset directory.
    """
    from components.specs.params import DataSlice
    from trainer.data import pack

    limits = DataSlice(train_limit=train_limit, test_limit=test_limit)
    manifest = pack(dataset.path, train_limit=limits.train_limit, test_limit=limits.test_limit)
    dataset.metadata.update({key: manifest[key] for key in ("counts", "complete", "source")})
    print(
        f"packed {manifest['counts']['train']} training and {manifest['counts']['test']} "
        f"test images from {manifest['source']}"
    )
