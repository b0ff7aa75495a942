package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/testgateway"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// trustWest has east trust west-edge: west enrolled with east for its
// site certificate; west's gateway presents it; an operator
// pins it at east (the pin read from west's cluster, an independent
// channel); the probe makes the GridSite Active and west's models reach
// east's gateway file.
func trustWest(ctx context.Context, east, west client.Client, gateway *testgateway.Gateway, site *v1alpha1.GridSite, output string) error {
	step("site trust: west-edge's certificate, issued by east for west's own key; east pins it and probes west's gateway over mutual TLS")
	var cert corev1.Secret
	if err := waitFor(ctx, func() bool {
		return west.Get(ctx, types.NamespacedName{Namespace: agentNamespace, Name: "grid-site-cert"}, &cert) == nil && len(cert.Data["tls.key"]) > 0
	}); err != nil {
		return fmt.Errorf("west issued no site certificate: %w", err)
	}
	leaf, err := gateway.PresentSecret(cert.Data)
	if err != nil {
		return err
	}
	pin := sitetrust.Fingerprint(leaf.Raw)
	fmt.Printf("    west's certificate: O=%s, %s, DNS %s, valid until %s\n", leaf.Subject.Organization[0], leaf.URIs[0], leaf.DNSNames[0], leaf.NotAfter.Format(time.DateOnly))
	if err := waitFor(ctx, func() bool {
		return east.Get(ctx, client.ObjectKeyFromObject(site), site) == nil && site.Status.Reason == sitetrust.ReasonTrustMaterialMissing
	}); err != nil {
		return err
	}
	fmt.Printf("    east's GridSite before pinning: %s (%s)\n", site.Status.Phase, site.Status.Reason)

	patched := site.DeepCopy()
	patched.Spec.GatewayEndpoint.TLS = &v1alpha1.GatewayTLS{Mode: "Mutual", ServerName: sitetrust.DNSName("west-edge")}
	patched.Spec.Trust = &v1alpha1.SiteTrust{CanonicalFingerprints: []string{pin}}
	sent := time.Now()
	if err := east.Patch(ctx, patched, client.MergeFrom(site)); err != nil {
		return err
	}
	fmt.Printf("    pinned %s… and serverName %s at east\n", pin[:16], sitetrust.DNSName("west-edge"))
	if err := waitFor(ctx, func() bool {
		return east.Get(ctx, client.ObjectKeyFromObject(site), site) == nil && site.Status.Phase == sitetrust.PhaseActive
	}); err != nil {
		return fmt.Errorf("west-edge never became Active: %s: %s", site.Status.Reason, site.Status.Message)
	}
	fmt.Printf("    east's GridSite: %s (%s) %s after the pin\n", site.Status.Phase, site.Status.Reason, time.Since(sent).Round(time.Millisecond))
	if err := waitFor(ctx, func() bool { return len(siteCandidates(output, "west-edge", true)) > 0 }); err != nil {
		return err
	}
	fmt.Printf("    east's gateway file now routes to west-edge (cluster west-edge, the provider hop) %s after the pin: %s\n",
		time.Since(sent).Round(time.Millisecond), strings.Join(siteCandidates(output, "west-edge", true), ", "))
	return nil
}

// siteCandidates are the models the gateway's file routes to site, fresh
// or not.
func siteCandidates(path, site string, fresh bool) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var doc struct {
		Overlay envelope.Overlay `json:"overlay"`
	}
	if json.Unmarshal(b, &doc) != nil {
		return nil
	}
	var out []string
	for _, c := range doc.Overlay.Candidates {
		if c.Site == site && c.Fresh == fresh {
			out = append(out, c.Name)
		}
	}
	return out
}
