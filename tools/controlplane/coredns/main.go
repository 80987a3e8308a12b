// CoreDNS with only the plugins the tier's Corefile names (harness/dns.py): bind, errors,
// ready, kubernetes, forward and cache. CoreDNS registers a plugin when its package is
// imported; upstream's main imports all of them (core/plugin), and the cloud providers' SDKs
// they bring take most of its build time.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() { coremain.Run() }
