"""The steps' I/O: cluster clients, creating and following jobs and services, local runners.

A step's body calls one function here (``launcher.run_training_job``,
``kserve.deploy_to_kserve``, ``katib.tune_job``, ``local_train.run_local_training`` ...),
which builds its objects with ``components.specs`` and talks to the cluster through
``kube.KubeClient``. The training job's faults are watchers (``watchers/``).
"""
