package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// evictWest has east's operator read the register of enrolled names and
// evict west-edge, which is down: east signs the eviction with the grid
// CA, refuses west from then on (a site that comes back gets the
// eviction from whichever site it meets first) and west's routes leave
// east's gateway file. Lifting it releases west's name: west comes back
// only by enrolling again, with a new token.
func evictWest(ctx context.Context, east client.Client, work, binDir, output string) error {
	step("east's operator evicts west-edge: signed with the grid CA, refused by every site, its routes gone from east's gateway")
	admin := filepath.Join(work, "east-admin.kubeconfig")
	operator := func(args ...string) (string, error) {
		fmt.Printf("    $ gridsync-agent %s\n", strings.Join(args, " "))
		out, err := exec.CommandContext(ctx, filepath.Join(binDir, "gridsync-agent"), append(args, "--kubeconfig", admin)...).CombinedOutput()
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			fmt.Println("    " + line)
		}
		return string(out), err
	}
	if _, err := operator("registered-sites", "--network", scope.Network, "--namespace", agentNamespace); err != nil {
		return fmt.Errorf("registered-sites: %w", err)
	}
	began := time.Now()
	if _, err := operator("evict", "--network", scope.Network, "--site", "west-edge"); err != nil {
		return fmt.Errorf("evict: %w", err)
	}
	var site v1alpha1.GridSite
	if err := waitFor(ctx, func() bool {
		return east.Get(ctx, types.NamespacedName{Name: scope.Network + "-west-edge"}, &site) == nil && site.Status.Phase == sitetrust.PhaseEvicted
	}); err != nil {
		return fmt.Errorf("west-edge never Evicted at east: %w", err)
	}
	fmt.Printf("    east's GridSite %s: %s (%s) %s after the command\n", site.Name, site.Status.Phase, site.Status.Reason, time.Since(began).Round(time.Millisecond))
	if err := waitFor(ctx, func() bool {
		return len(siteCandidates(output, "west-edge", false))+len(siteCandidates(output, "west-edge", true)) == 0
	}); err != nil {
		return fmt.Errorf("east's gateway file kept west-edge's routes: %w", err)
	}
	fmt.Printf("    east's gateway file holds no route to west-edge %s after the command\n", time.Since(began).Round(time.Millisecond))
	n, err := waitNetwork(ctx, east, func(n *v1alpha1.GridNetwork) bool { return n.Status.TrustBundle != nil })
	if err != nil {
		return err
	}
	if c := meta.FindStatusCondition(n.Status.Conditions, controller.ConditionEvictions); c != nil {
		fmt.Printf("    east's Evictions condition: %s\n", c.Message)
	}
	if _, err := operator("evict", "--network", scope.Network, "--site", "west-edge", "--lift", "--namespace", agentNamespace); err != nil {
		return fmt.Errorf("evict --lift: %w", err)
	}
	fmt.Println("    west's certificates from before the eviction stay refused everywhere: it comes back by enrolling again")

	step("east's operator rotates the grid CA: a new CA beside the old, then issuing, then the old one retired")
	for _, stage := range []string{"add", "switch", "retire"} {
		// The demo's gateways load their Secret at once: no settling.
		if _, err := operator("rotate-ca", "--network", scope.Network, "--stage", stage, "--settle", "0s", "--timeout", "1m"); err != nil {
			return fmt.Errorf("rotate-ca %s: %w", stage, err)
		}
	}
	n, err = waitNetwork(ctx, east, func(n *v1alpha1.GridNetwork) bool {
		return n.Status.TrustBundle != nil && len(n.Status.TrustBundle.Roots) == 1
	})
	if err != nil {
		return err
	}
	var cert corev1.Secret
	if err := east.Get(ctx, types.NamespacedName{Namespace: agentNamespace, Name: "grid-site-cert"}, &cert); err != nil {
		return err
	}
	if certs, err := sitetrust.ParseCertificates(cert.Data[corev1.TLSCertKey]); err == nil {
		fmt.Printf("    east trusts the new CA alone (%s…); its site certificate, renewed under it, is valid until %s\n",
			n.Status.TrustBundle.Roots[0][:16], certs[0].NotAfter.UTC().Format(time.RFC3339))
	}
	if res, ok := fileResult(output); ok {
		fmt.Printf("    east's gateway kept serving throughout: %d candidates\n", res.CandidateCount)
	}
	return nil
}
