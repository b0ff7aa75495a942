package base

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

// EventWriter records Kubernetes Events for phase changes of the
// cluster-scoped Grid objects. They go to the agent's own namespace (a
// cluster-scoped object has none, and the agent may write Events only
// there): kubectl -n <agent namespace> get events
// --field-selector involvedObject.kind=InferenceProvider. An Event is a
// nicety: a failure to write one is logged, never retried.
type EventWriter struct {
	Client    client.Client
	Namespace string
	Component string
	Logger    *slog.Logger
}

// Record writes one Event about obj.
func (w EventWriter) Record(ctx context.Context, obj client.Object, kind, eventType, reason, message string) {
	if w.Namespace == "" {
		return
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x", obj.GetName(), now.UnixNano()),
			Namespace: w.Namespace,
		},
		// The API server wants an Event's involved object in the Event's
		// namespace (or both in default); a cluster-scoped object has
		// none, so it is given the agent's, as the Grid reference does.
		InvolvedObject: corev1.ObjectReference{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: kind, Namespace: w.Namespace,
			Name: obj.GetName(), UID: obj.GetUID(), ResourceVersion: obj.GetResourceVersion(),
		},
		Reason:              reason,
		Message:             message,
		Type:                eventType,
		Source:              corev1.EventSource{Component: w.Component},
		ReportingController: "grid.praxis.fast/" + w.Component,
		ReportingInstance:   w.Component,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
	}
	if err := w.Client.Create(ctx, ev); err != nil {
		w.Logger.Warn("event_not_recorded", "kind", kind, "name", obj.GetName(), "reason", reason, "error", err)
	}
}
