"""The cluster test tier's harness: builds, starts and stops a real control plane here.

One module per concern, used by ``tools/controlplane/cluster.py`` (the command line):

- ``paths``: where the build, logs, state and caches live;
- ``components``: the pinned Go modules and the programs each one builds;
- ``build``: ``go build`` into the machine-level cache, manifests rendered with kustomize;
- ``pki``: the harness's CA and the serving certificate every webhook uses;
- ``processes``: starting, probing, waiting for and stopping local programs;
- ``control_plane``: etcd, kube-apiserver, controller-manager, scheduler and kwok (kwokctl);
- ``api``: the few REST calls that create the cluster's first objects;
- ``manifests``: webhook configurations pointed at loopback, config maps found;
- ``controllers``: one module per Kubeflow controller (how it is configured and started);
- ``commands``: ``build``, ``up``, ``down``, ``status``, ``restart-apiserver``.
"""
