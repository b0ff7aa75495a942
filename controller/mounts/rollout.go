package mounts

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// Rollout is where a Deployment's rollout stands, from its status alone
// (the agent may get its one Deployment, nothing else: no ReplicaSets, no
// pods).
type Rollout struct {
	// Settled: the controller has seen the current template and no pod of
	// an older one remains (terminating ones included), so the inactive
	// slot is no pod's config and obsolete mounts are no pod's.
	Settled bool
	// Complete: settled, and every wanted replica of the current template
	// is available. A Deployment scaled to zero never is: no pod proves
	// the mounts.
	Complete bool
	// Reason and Message say why it is not complete.
	Reason, Message string
}

// RolloutOf reads a Deployment's status.
func RolloutOf(d *appsv1.Deployment) Rollout {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	terminating := int32(0)
	if st.TerminatingReplicas != nil {
		terminating = *st.TerminatingReplicas
	}
	r := Rollout{Reason: ReasonRolloutInProgress}
	switch {
	case st.ObservedGeneration < d.Generation:
		r.Message = fmt.Sprintf("the Deployment controller has not yet seen generation %d", d.Generation)
		return r
	case st.Replicas > st.UpdatedReplicas || terminating > 0:
		r.Message = fmt.Sprintf("%d of %d pods run the current template; %d older and %d terminating remain",
			st.UpdatedReplicas, st.Replicas, st.Replicas-st.UpdatedReplicas, terminating)
		if c := progressing(d); c != nil && c.Reason == "ProgressDeadlineExceeded" {
			r.Message += "; the rollout exceeded its progress deadline: " + c.Message
		}
		return r
	}
	r.Settled = true
	switch {
	case want == 0:
		r.Reason, r.Message = ReasonScaledToZero, "the Deployment is scaled to zero: no pod runs the config and its mounts yet"
	case st.UpdatedReplicas < want || st.AvailableReplicas < want:
		r.Message = fmt.Sprintf("%d of %d replicas run the current template, %d available", st.UpdatedReplicas, want, st.AvailableReplicas)
		if c := progressing(d); c != nil && c.Reason == "ProgressDeadlineExceeded" {
			r.Message += "; the rollout exceeded its progress deadline: " + c.Message
		}
	default:
		r.Complete, r.Reason = true, ReasonRolledOut
		r.Message = fmt.Sprintf("%d of %d replicas run the current template and are available; no older pod remains", st.AvailableReplicas, want)
	}
	return r
}

func progressing(d *appsv1.Deployment) *appsv1.DeploymentCondition {
	for i := range d.Status.Conditions {
		if c := &d.Status.Conditions[i]; c.Type == appsv1.DeploymentProgressing && c.Status != corev1.ConditionUnknown {
			return c
		}
	}
	return nil
}

// Action is what the agent does to the Deployment this time.
type Action int

const (
	// Wait: nothing to patch now (a rollout to wait for, or Ready).
	Wait Action = iota
	// Switch: write the inactive slot, then one patch of the config
	// source, the projections and the revisions.
	Switch
	// Prune: one patch leaving out the obsolete owned projections.
	Prune
)

// Decision is the action and the status it leaves.
type Decision struct {
	Action                 Action
	Phase, Reason, Message string
}

// Decide is the reconciliation's one rule. A template that differs from
// the desired one is switched only once the last rollout settled (the
// inactive slot may still be an old pod's config until then); obsolete
// mounts are pruned only once the rollout that stopped needing them is
// complete (no old pod remains); Ready needs a complete rollout of the desired template.
func Decide(inSync bool, obsolete int, r Rollout) Decision {
	switch {
	case !inSync && r.Settled:
		return Decision{Action: Switch, Phase: PhaseReconciling, Reason: ReasonConfigSwitched}
	case !inSync:
		return Decision{Phase: PhaseWaitingForRollout, Reason: r.Reason,
			Message: "a new config waits for the previous rollout before its slot is reused: " + r.Message}
	case obsolete > 0 && r.Complete:
		return Decision{Action: Prune, Phase: PhaseReconciling, Reason: ReasonMountsPruned}
	case r.Complete && obsolete == 0:
		return Decision{Phase: PhaseReady, Reason: r.Reason, Message: r.Message}
	default:
		return Decision{Phase: PhaseWaitingForRollout, Reason: r.Reason, Message: r.Message}
	}
}
