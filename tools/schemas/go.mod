// Upstream modules the fast test tier needs only for their files (CRD schemas); nothing
// here is built. `go mod download -json MODULE` in this folder gives each one's directory
// (tools/upstream.py). The controllers' own modules are pinned in tools/controlplane/*/.
module fmnist.local/schemas

go 1.26.0

require github.com/karmada-io/karmada v1.18.1
