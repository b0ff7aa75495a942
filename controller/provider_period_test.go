package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/gridsync/gridsync/controller/api/v1alpha1"
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
		assert.Equal(t, c.want, healthPeriod(&c.hc), "%+v", c.hc)
	}
	assert.Equal(t, 500*time.Millisecond, parseDuration("500ms"))
	assert.Zero(t, parseDuration(""))
	assert.Zero(t, parseDuration("-1s"))
}
