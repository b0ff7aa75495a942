// Package drain drains a provider (or undrains it) and waits for the
// evidence that it took effect: every consumer gateway of its network at
// this site publishes a revision that lists the provider as asked, and
// every pod of the gateway reports serving that revision (rollout
// evidence). It is what `gridsync-agent drain` runs, with the operator's
// own credentials.
package drain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
)

// Options say what to drain and how to wait.
type Options struct {
	Provider string
	// Undrain takes new sessions again.
	Undrain bool
	// Poll is how often the network is read (default 500 ms).
	Poll time.Duration
	// Out receives a line per gateway when it is done.
	Out io.Writer
}

// Admission states the provider's candidates must carry.
const (
	drained   = "existing_only"
	undrained = "new_and_existing"
)

// ErrWaiting is returned with the gateways not done when ctx ends first.
var ErrWaiting = errors.New("not every gateway serves it yet")

// Run sets the provider's spec.trafficPolicy.drain and waits until every
// consumer gateway of its network is done: it no longer lists the
// provider, or its published revision lists it as asked and every pod
// that reports serves that revision. A gateway without reporting pods is
// done once published (its pods' delivery is not known: said so).
func Run(ctx context.Context, c client.Client, opts Options) error {
	poll := opts.Poll
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	out := opts.Out
	if out == nil {
		out = io.Discard
	}
	var p v1alpha1.InferenceProvider
	if err := c.Get(ctx, types.NamespacedName{Name: opts.Provider}, &p); err != nil {
		return fmt.Errorf("read InferenceProvider %s: %w", opts.Provider, err)
	}
	patch := `{"spec":{"trafficPolicy":{"drain":true}}}`
	want := drained
	if opts.Undrain {
		patch, want = `{"spec":{"trafficPolicy":null}}`, undrained
	}
	if err := c.Patch(ctx, &p, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return fmt.Errorf("patch InferenceProvider %s: %w", opts.Provider, err)
	}
	start := time.Now()
	done := map[string]bool{}
	var pending []string
	// waited is the wait ending with what was pending at the last look.
	waited := func() error { return fmt.Errorf("%w: %s", ErrWaiting, strings.Join(orUnknown(pending), "; ")) }
	for {
		next, err := pass(ctx, c, p.Name, p.Spec.GridNetworkRef, want, done, start, out)
		if err != nil && ctx.Err() != nil {
			// The time given ran out during a read: the wait ended.
			return waited()
		}
		if err != nil {
			return err
		}
		pending = next
		if len(pending) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return waited()
		case <-time.After(poll):
		}
	}
}

// orUnknown is pending, or a word for not having looked yet.
func orUnknown(pending []string) []string {
	if len(pending) == 0 {
		return []string{"no gateway looked at yet"}
	}
	return pending
}

// pass looks at every gateway not done yet and returns what the others
// wait for.
func pass(ctx context.Context, c client.Client, provider, networkName, want string, done map[string]bool, start time.Time, out io.Writer) ([]string, error) {
	var network v1alpha1.GridNetwork
	if err := c.Get(ctx, types.NamespacedName{Name: networkName}, &network); err != nil {
		return nil, fmt.Errorf("read GridNetwork %s: %w", networkName, err)
	}
	var pending []string
	for _, g := range network.Spec.ConsumerGateways {
		key := g.Namespace + "/" + g.Name
		if done[key] {
			continue
		}
		line, waiting, err := gatewayDone(ctx, c, &network, g, provider, want)
		if err != nil {
			return nil, err
		}
		if waiting != "" {
			pending = append(pending, key+": "+waiting)
			continue
		}
		done[key] = true
		fmt.Fprintf(out, "gateway %s: %s (%.1f s)\n", key, line, time.Since(start).Seconds())
	}
	return pending, nil
}

// gatewayDone says whether one gateway is done (line) or what it waits
// for (waiting).
func gatewayDone(ctx context.Context, c client.Client, network *v1alpha1.GridNetwork, g v1alpha1.ConsumerGateway, provider, want string) (line, waiting string, err error) {
	var cm corev1.ConfigMap
	key := types.NamespacedName{Namespace: g.Namespace, Name: envelope.ConfigMapName(network.Name, g.Name)}
	err = c.Get(ctx, key, &cm)
	if apierrors.IsNotFound(err) {
		return "", "its overlay is not published yet", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("read ConfigMap %s: %w", key, err)
	}
	doc := []byte(cm.Data[envelope.DataKeyEnvelope])
	res, invalid := envelope.Validate(doc, envelope.Options{})
	if reason := envelope.RejectionReason(invalid); reason != "" {
		return "", "its overlay is refused (" + string(reason) + ")", nil
	}
	states, err := admissionOf(doc, provider)
	if err != nil {
		return "", "", err
	}
	if len(states) == 0 {
		return "not listed in its overlay", "", nil
	}
	if slices.ContainsFunc(states, func(s string) bool { return s != want }) {
		return "", fmt.Sprintf("revision %s lists it %s", short(res.Revision), strings.Join(states, ",")), nil
	}
	for _, s := range network.Status.OverlayStatus {
		if s.Namespace != g.Namespace || s.GatewayName != g.Name {
			continue
		}
		d := s.Delivery
		switch {
		case s.RenderedRevision != res.Revision:
			return "", "its status does not describe revision " + short(res.Revision) + " yet", nil
		case d == nil || d.ReportingPods == 0:
			return fmt.Sprintf("revision %s lists it %s; no pod reports its delivery (rollout evidence is off or no pod runs)", short(res.Revision), want), "", nil
		case d.PodsOnRevision < d.ReportingPods:
			return "", fmt.Sprintf("revision %s on %d of %d pods", short(res.Revision), d.PodsOnRevision, d.ReportingPods), nil
		}
		return fmt.Sprintf("revision %s lists it %s, served by %d of %d pods", short(res.Revision), want, d.PodsOnRevision, d.ReportingPods), "", nil
	}
	return "", "its status has no entry yet", nil
}

// admissionOf returns the admission states of the provider's candidates
// (a local provider's candidates carry its name as their site).
func admissionOf(doc []byte, provider string) ([]string, error) {
	var env struct {
		Overlay envelope.Overlay `json:"overlay"`
	}
	if err := json.Unmarshal(doc, &env); err != nil {
		return nil, fmt.Errorf("decode overlay: %w", err)
	}
	var out []string
	for _, c := range env.Overlay.Candidates {
		if c.Site == provider {
			out = append(out, c.AdmissionState)
		}
	}
	return out, nil
}

func short(revision string) string { return revision[:min(12, len(revision))] }
