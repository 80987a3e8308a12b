"""The ``fmnist`` command line: run, serve, compile, render, sweep, submit and schedule.

``cli.main`` is the entry point; each subcommand is a module of ``cli.commands``; what
several commands share is a module here (flags, the Kubeflow Pipelines server, uploads,
the objects the steps would create). Nothing in ``pipelines`` or ``components`` imports it.
"""
