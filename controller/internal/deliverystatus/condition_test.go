package deliverystatus

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

func TestTheDeliveredConditionFollowsTheReports(t *testing.T) {
	rev := "0123456789abcdef0123"
	gw := func(ns string, d *v1alpha1.GatewayDelivery) v1alpha1.GatewayOverlayStatus {
		return v1alpha1.GatewayOverlayStatus{Namespace: ns, GatewayName: "edge", RenderedRevision: rev, Delivery: d}
	}
	lagging := &v1alpha1.GatewayDelivery{ReportingPods: 8, PodsOnRevision: 1, LaggingPods: 7, Lagging: []v1alpha1.LaggingPod{
		{Pod: "p1", Reason: "OlderRevision"}, {Pod: "p2", Reason: "Silent"}, {Pod: "p3", Reason: "Cold"},
		{Pod: "p4", Reason: "Rejecting"}, {Pod: "p5", Reason: "OlderRevision"}, {Pod: "p6", Reason: "OlderRevision"},
	}}
	for _, c := range []struct {
		name     string
		overlays []v1alpha1.GatewayOverlayStatus
		status   metav1.ConditionStatus
		reason   string
		message  string
	}{
		{"no gateway", nil, metav1.ConditionUnknown, ReasonNoReports, "no pod of the network's gateways has reported its delivery"},
		{"no report", []v1alpha1.GatewayOverlayStatus{gw("a", nil)}, metav1.ConditionUnknown, ReasonNoReports, "no pod of the network's gateways has reported its delivery"},
		{"every pod on its revision",
			[]v1alpha1.GatewayOverlayStatus{gw("a", &v1alpha1.GatewayDelivery{ReportingPods: 2, PodsOnRevision: 2}), gw("b", nil), gw("c", &v1alpha1.GatewayDelivery{ReportingPods: 48, PodsOnRevision: 48})},
			metav1.ConditionTrue, ReasonRevisionDelivered, "50/50 pods on their gateway's rendered revision"},
		{"two pods lagging",
			[]v1alpha1.GatewayOverlayStatus{gw("a", &v1alpha1.GatewayDelivery{ReportingPods: 48, PodsOnRevision: 48}), gw("b", &v1alpha1.GatewayDelivery{ReportingPods: 2, LaggingPods: 2,
				Lagging: []v1alpha1.LaggingPod{{Pod: "x", Reason: "OlderRevision"}, {Pod: "y", Reason: "Rejecting"}}})},
			metav1.ConditionFalse, ReasonPodsLagging, "48/50 pods on revision 0123456789ab; lagging: b/x (OlderRevision), b/y (Rejecting)"},
		{"more lagging than a message names", []v1alpha1.GatewayOverlayStatus{gw("a", lagging)},
			metav1.ConditionFalse, ReasonPodsLagging, "1/8 pods on revision 0123456789ab; lagging: a/p1 (OlderRevision), a/p2 (Silent), a/p3 (Cold), a/p4 (Rejecting), a/p5 (OlderRevision) and 2 more"},
		{"only silent pods left", []v1alpha1.GatewayOverlayStatus{gw("a", &v1alpha1.GatewayDelivery{LaggingPods: 1, Lagging: []v1alpha1.LaggingPod{{Pod: "z", Reason: "Silent"}}})},
			metav1.ConditionFalse, ReasonPodsLagging, "0/0 pods on revision 0123456789ab; lagging: a/z (Silent)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, reason, message := Condition(c.overlays)
			assert.Equal(t, c.status, status)
			assert.Equal(t, c.reason, reason)
			assert.Equal(t, c.message, message)
		})
	}
}
