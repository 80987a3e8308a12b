// kube-router's network policy controller alone: what upstream's program runs with
// --run-firewall and without its router and service proxy (kube-router v2.10.0
// pkg/cmd/kube-router.go, KubeRouter.Run), for the tier's real nodes (harness/enforcer.py).
// Upstream's main also links the router (BGP, the AWS SDK) and the IPVS proxy, which would
// take most of its build time; they are off in a policy-only setup anyway.
//
// It takes upstream's flags; --cleanup-config removes the chains and ipsets it made and exits.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cloudnativelabs/kube-router/v2/pkg/controllers/netpol"
	"github.com/cloudnativelabs/kube-router/v2/pkg/healthcheck"
	"github.com/cloudnativelabs/kube-router/v2/pkg/options"
	"github.com/cloudnativelabs/kube-router/v2/pkg/svcip"
	"github.com/spf13/pflag"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

func main() {
	klog.InitFlags(nil)
	config := options.NewKubeRouterConfig()
	config.AddFlags(pflag.CommandLine)
	pflag.Parse()
	_ = flag.Set("v", config.VLevel)
	// Only the firewall runs, so the health check waits for its heartbeats alone.
	config.RunFirewall, config.RunRouter, config.RunServiceProxy = true, false, false
	if config.HelpRequested {
		pflag.Usage()
		return
	}
	if config.CleanupConfig {
		(&netpol.NetworkPolicyController{}).Cleanup()
		return
	}
	if err := run(config); err != nil {
		fmt.Fprintf(os.Stderr, "kube-router: %v\n", err)
		os.Exit(1)
	}
}

func run(config *options.KubeRouterConfig) error {
	rest, err := clientcmd.BuildConfigFromFlags(config.Master, config.Kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods().Informer()
	namespaces := factory.Core().V1().Namespaces().Informer()
	policies := factory.Networking().V1().NetworkPolicies().Informer()
	factory.Start(stop)
	for kind, synced := range factory.WaitForCacheSync(stop) {
		if !synced {
			return fmt.Errorf("the %v informer did not sync", kind)
		}
	}

	ranges, err := svcip.NewValidator(svcip.Config{
		ExternalIPCIDRs:   config.ExternalIPCIDRs,
		LoadBalancerCIDRs: config.LoadBalancerCIDRs,
		ClusterIPCIDRs:    config.ClusterIPCIDRs,
		StrictValidation:  config.StrictExternalIPValidation,
		EnableIPv4:        config.EnableIPv4,
		EnableIPv6:        config.EnableIPv6,
	})
	if err != nil {
		return err
	}
	iptables, ipsets, err := netpol.NewIPTablesHandlers(config)
	if err != nil {
		return err
	}
	npc, err := netpol.NewNetworkPolicyController(client, config, pods, policies, namespaces,
		&sync.Mutex{}, nil, iptables, ipsets, ranges)
	if err != nil {
		return err
	}
	if _, err := pods.AddEventHandler(npc.PodEventHandler); err != nil {
		return err
	}
	if _, err := namespaces.AddEventHandler(npc.NamespaceEventHandler); err != nil {
		return err
	}
	if _, err := policies.AddEventHandler(npc.NetworkPolicyEventHandler); err != nil {
		return err
	}

	health, err := healthcheck.NewHealthController(config)
	if err != nil {
		return err
	}
	beats := make(chan *healthcheck.ControllerHeartbeat, 10)
	var wg sync.WaitGroup
	wg.Add(3)
	go health.RunServer(stop, &wg)
	health.SetAlive()
	go health.RunCheck(beats, stop, &wg)
	go npc.Run(beats, stop, &wg)

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	<-signals
	close(stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select { // the controller removes nothing on stop: --cleanup-config does
	case <-done:
	case <-time.After(10 * time.Second):
	}
	return nil
}
