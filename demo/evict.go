package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

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
	return nil
}
