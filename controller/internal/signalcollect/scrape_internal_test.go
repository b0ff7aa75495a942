package signalcollect

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A scrape's timeout is metricsConfig.timeout, 2 s when unset or zero,
// never more than a probe's 5 s.
func TestScrapeTimeout(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"": 2 * time.Second, "0s": 2 * time.Second, "500ms": 500 * time.Millisecond, "3s": 3 * time.Second, "30s": 5 * time.Second,
	} {
		assert.Equal(t, want, scrapeTimeout(in), in)
	}
}
