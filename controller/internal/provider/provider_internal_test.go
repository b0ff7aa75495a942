package provider

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/controller/providerpolicy"
)

// A health check's interval is interval, else periodSeconds (its earlier
// name), else 30 s; its timeout is read the same way, 0 for the default.
func TestHealthPeriodReadsBothNames(t *testing.T) {
	for _, c := range []struct {
		hc   v1alpha1.HealthCheck
		want time.Duration
	}{
		{v1alpha1.HealthCheck{}, 30 * time.Second},
		{v1alpha1.HealthCheck{PeriodSeconds: 10}, 10 * time.Second},
		{v1alpha1.HealthCheck{Interval: "2m"}, 2 * time.Minute},
		{v1alpha1.HealthCheck{Interval: "45s", PeriodSeconds: 45}, 45 * time.Second},
		{v1alpha1.HealthCheck{Interval: "garbage", PeriodSeconds: 7}, 7 * time.Second},
	} {
		assert.Equal(t, c.want, HealthPeriod(&c.hc), "%+v", c.hc)
	}
	assert.Equal(t, 500*time.Millisecond, ParseDuration("500ms"))
	assert.Zero(t, ParseDuration(""))
	assert.Zero(t, ParseDuration("-1s"))
	assert.Zero(t, ParseDuration("0s"))
}

// A path joins its base URL with one slash, whether either has it.
func TestJoinPath(t *testing.T) {
	for _, base := range []string{"https://p.example:8443", "https://p.example:8443/"} {
		assert.Equal(t, "https://p.example:8443/metrics", JoinPath(base, "/metrics"))
		assert.Equal(t, "https://p.example:8443/metrics", JoinPath(base, "metrics"))
	}
}

// The Accepted condition is written by the code shared with GridSites;
// its reasons are the provider policy's.
func TestAcceptedReasonsAreThePolicys(t *testing.T) {
	assert.Equal(t, providerpolicy.ReasonAccepted, base.AcceptedCondition(nil, 1).Reason)
	assert.Equal(t, providerpolicy.ReasonFieldNotSupported, base.AcceptedCondition([]string{"spec.cost"}, 1).Reason)
	assert.Equal(t, base.ConditionAccepted, base.AcceptedCondition(nil, 1).Type)
}
