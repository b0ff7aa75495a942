// Package deliverystatus holds the GridNetwork's Delivered condition: whether
// the pods of its gateways hold the overlay revisions rendered for them, as
// their delivery reports say. A user waits on it with
// kubectl wait --for=condition=Delivered gridnetwork/<name>.
package deliverystatus

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

// ConditionDelivered is the condition's type.
const ConditionDelivered = "Delivered"

// The condition's reasons.
const (
	// ReasonRevisionDelivered: every reporting pod of every gateway holds
	// its gateway's rendered revision.
	ReasonRevisionDelivered = "RevisionDelivered"
	// ReasonPodsLagging: some reporting pod is behind, rejecting, cold or
	// silent; the message names them.
	ReasonPodsLagging = "PodsLagging"
	// ReasonNoReports: no pod of the network's gateways has reported.
	ReasonNoReports = "NoReports"
)

// maxNamed bounds the lagging pods a message names, so that it stays
// short on a large network (the overlay statuses list more).
const maxNamed = 5

// Condition is the Delivered condition's status, reason and message from
// the overlay statuses, their delivery summaries filled in.
func Condition(overlays []v1alpha1.GatewayOverlayStatus) (metav1.ConditionStatus, string, string) {
	var on, reporting, lagging int32
	var names []string
	revision := ""
	for _, o := range overlays {
		d := o.Delivery
		if d == nil {
			continue
		}
		on += d.PodsOnRevision
		reporting += d.ReportingPods
		lagging += d.LaggingPods
		if d.LaggingPods > 0 && revision == "" {
			revision = o.RenderedRevision
		}
		for _, p := range d.Lagging {
			names = append(names, fmt.Sprintf("%s/%s (%s)", o.Namespace, p.Pod, p.Reason))
		}
	}
	switch {
	case reporting == 0 && lagging == 0:
		return metav1.ConditionUnknown, ReasonNoReports, "no pod of the network's gateways has reported its delivery"
	case lagging == 0 && on == reporting:
		return metav1.ConditionTrue, ReasonRevisionDelivered,
			fmt.Sprintf("%d/%d pods on their gateway's rendered revision", on, reporting)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%d pods on revision %s", on, reporting, short(revision))
	if len(names) > 0 {
		shown := names[:min(len(names), maxNamed)]
		fmt.Fprintf(&b, "; lagging: %s", strings.Join(shown, ", "))
		if more := int(lagging) - len(shown); more > 0 {
			fmt.Fprintf(&b, " and %d more", more)
		}
	}
	return metav1.ConditionFalse, ReasonPodsLagging, b.String()
}

// short is a revision as a message shows it: its first 12 characters, as
// a short commit hash is (the revision is a SHA-256 in hex).
func short(revision string) string {
	if len(revision) > 12 {
		return revision[:12]
	}
	return revision
}
