package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/gridsync/gridsync/api/v1alpha1"
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
	assert.Zero(t, parseDuration("0s"))
}

// A scrape's timeout is metricsConfig.timeout, 2 s when unset or zero,
// never more than a probe's 5 s.
func TestScrapeTimeout(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"": 2 * time.Second, "0s": 2 * time.Second, "500ms": 500 * time.Millisecond, "3s": 3 * time.Second, "30s": 5 * time.Second,
	} {
		assert.Equal(t, want, scrapeTimeout(in), in)
	}
}

// A path joins its base URL with one slash, whether either has it.
func TestJoinPath(t *testing.T) {
	for _, base := range []string{"https://p.example:8443", "https://p.example:8443/"} {
		assert.Equal(t, "https://p.example:8443/metrics", joinPath(base, "/metrics"))
		assert.Equal(t, "https://p.example:8443/metrics", joinPath(base, "metrics"))
	}
}
