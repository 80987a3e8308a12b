"""Subcommands of the ``fmnist`` CLI, one module each."""
