"""What runs in the pipeline's step pods (and in ``kfp.local``), in three layers.

``specs/`` is pure: the parameter sets and the builders of every Kubernetes object.
``runtime/`` does the I/O: the cluster clients, the waits, the local runners. ``steps/``
holds the thin KFP components, one a step, each calling into ``runtime``. All of it is
installed in the components image (images/components.Dockerfile).
"""
