"""The pipeline definitions, registered by name.

``PIPELINES`` names every pipeline ``fmnist compile`` builds, as ``module:factory``, so
listing them does not import kfp. A factory takes ``pipelines.settings.CompileSettings``.
"""

import importlib

PIPELINES = {
    "fashion-mnist": "pipelines.fashion_mnist:fashion_mnist_pipeline",
    "fashion-mnist-tune": "pipelines.fashion_mnist_tune:fashion_mnist_tune_pipeline",
}


def load_pipeline(name: str, settings=None):
    """The pipeline registered under ``name``, built with ``settings`` (None: the defaults)."""
    module, factory = PIPELINES[name].split(":")
    build = getattr(importlib.import_module(module), factory)
    return build() if settings is None else build(settings)
