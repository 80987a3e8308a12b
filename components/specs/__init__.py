"""Pure parts: the parameter sets and the builders of every Kubernetes object. No I/O."""
