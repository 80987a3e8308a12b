"""The pipeline's steps: thin KFP components, one module per step.

Each step converts its inputs into a parameter set, calls ``components.runtime``, and
writes its outputs. Steps run from the components image (``images/components.Dockerfile``),
which has this package installed; the image is set per task at compile time.
"""
