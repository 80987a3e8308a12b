"""The pipelines and the ``fmnist`` command line.

``PIPELINES`` names every pipeline ``fmnist compile`` builds, as ``module:function``,
so listing them does not import kfp.
"""

import importlib

PIPELINES = {
    "fashion-mnist": "pipelines.fashion_mnist:fashion_mnist",
    "fashion-mnist-tune": "pipelines.fashion_mnist_tune:fashion_mnist_tune",
}


def load_pipeline(name: str):
    """The ``@dsl.pipeline`` function registered under ``name``."""
    module, function = PIPELINES[name].split(":")
    return getattr(importlib.import_module(module), function)
