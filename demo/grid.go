package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/test/testgrid"
	"github.com/gridsync/gridsync/test/testwan"
)

// gridAcrossAWAN runs two real sites, each its own control plane and
// node with the agent and gateway charts installed from the project's
// images, joined by an emulated WAN (100 ms round trips, 1 % loss) and
// reaching each other only through load balancer addresses the link
// translates: each site's provider reaches the other's gateway file;
// cutting the link withdraws the routes, healing it brings them back.
func gridAcrossAWAN(ctx context.Context) error {
	step("a grid of two real nodes across an emulated WAN: each site its own control plane, kubelet and containerd, both charts installed from the images")
	if ok, err := nodesCanRun(true); !ok || err != nil {
		return err
	}
	link := testwan.Link{Delay: 50 * time.Millisecond, Jitter: 5 * time.Millisecond, Loss: 0.01}
	began := time.Now()
	g, err := testgrid.Start(ctx, testgrid.Options{Sites: []string{"east", "west"}, Link: link,
		Logf: func(format string, args ...any) { fmt.Printf("    "+format+"\n", args...) }})
	defer func() { _ = g.Stop() }()
	if err != nil {
		return err
	}
	show := func(seen map[string][]string) {
		for _, p := range g.Pairs() {
			key := p[0].Name + "/" + p[1].Name
			fmt.Printf("    %s sees %s: %s\n", p[0].Name, p[1].Name, strings.Join(seen[key], "; "))
		}
	}

	step("each site joins the other over SWIM at its load balancer address, probes its gateway over mutual TLS, and routes to its provider")
	seen, err := g.Watch(ctx, time.Now(), 4*time.Minute, testgrid.Routed)
	if err != nil {
		return err
	}
	show(seen)
	fmt.Printf("    the grid routes both ways %s after the first control plane started\n", time.Since(began).Round(time.Millisecond))
	east, west := g.Sites[0], g.Sites[1]
	var gs v1alpha1.GridSite
	if err := west.Client.Get(ctx, client.ObjectKey{Name: testgrid.Network + "-" + east.Name}, &gs); err != nil {
		return err
	}
	fmt.Printf("    west's GridSite %s: %s (%s), gateway %s, the address east advertises (nothing binds it)\n",
		gs.Name, gs.Status.Phase, gs.Status.Reason, gs.Spec.GatewayEndpoint.Address)
	cands, err := west.Candidates(ctx)
	if err != nil {
		return err
	}
	for _, c := range cands {
		fmt.Printf("    west's gateway file, read from its pod's volume on west's node: %s (site %s, cluster %s, fresh %v)\n", c.Name, c.Site, c.Cluster, c.Fresh)
	}

	if err := g.Steady(ctx, 6*time.Second, time.Minute, testgrid.Routed); err != nil {
		return err
	}
	step("cutting the link between the two sites: each suspects the other, declares it dead, and withdraws its routes")
	cut := time.Now()
	g.Lab.Partition([]int{0}, []int{1})
	if seen, err = g.Watch(ctx, cut, 90*time.Second, testgrid.Withdrawn); err != nil {
		return err
	}
	show(seen)

	step("healing the link: each finds the other again, probes it again, and routes to it")
	healed := time.Now()
	g.Lab.Heal()
	if seen, err = g.Watch(ctx, healed, 90*time.Second, testgrid.Routed); err != nil {
		return err
	}
	show(seen)
	st := g.Lab.Stats()
	fmt.Printf("    the link carried %d packets, lost %d of them, and dropped %d while cut\n", st.Forwarded, st.Lost, st.Cut)
	return nil
}
