package provider

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// ScrapeResult is the outcome of one scrape of a provider's metrics.
type ScrapeResult struct {
	OK              bool
	Reason, Message string
}

// ScrapeStatus is the last scrape outcome of each provider, set by the
// signals collector and read by the provider reconciler, which a change
// wakes so that the provider's status says what the log says.
type ScrapeStatus struct {
	mu      sync.Mutex
	last    map[string]ScrapeResult
	changed func(provider string)
}

// NewScrapeStatus is an empty status; changed is told the provider whose
// outcome changed.
func NewScrapeStatus(changed func(provider string)) *ScrapeStatus {
	return &ScrapeStatus{changed: changed}
}

// Collector exports each provider's last scrape outcome
// (gridsync_signals_provider_scraped).
func (s *ScrapeStatus) Collector() prometheus.Collector { return scrapedCollector{s} }

// Set records provider's outcome and says whether it changed.
func (s *ScrapeStatus) Set(provider string, r ScrapeResult) bool {
	s.mu.Lock()
	if s.last == nil {
		s.last = map[string]ScrapeResult{}
	}
	prev, seen := s.last[provider]
	s.last[provider] = r
	s.mu.Unlock()
	if seen && prev == r {
		return false
	}
	if s.changed != nil {
		s.changed(provider)
	}
	return true
}

var providerScrapedDesc = prometheus.NewDesc("gridsync_signals_provider_scraped",
	"1 when the provider's last metrics scrape succeeded, 0 when it failed or could not be sent (its MetricsScraped condition says why); one series per provider with spec.metricsConfig.",
	[]string{"provider"}, nil)

// scrapedCollector exports each provider's last scrape outcome, so that an
// alert can name the provider whose load the agent no longer reads.
type scrapedCollector struct{ s *ScrapeStatus }

func (c scrapedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- providerScrapedDesc }

func (c scrapedCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for provider, r := range c.s.last {
		v := 0.0
		if r.OK {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(providerScrapedDesc, prometheus.GaugeValue, v, provider)
	}
}

func (s *ScrapeStatus) get(provider string) (ScrapeResult, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.last[provider]
	return r, ok
}

// Retain forgets providers no longer scraped (gone, or without
// metricsConfig).
func (s *ScrapeStatus) Retain(keep map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range s.last {
		if !keep[p] {
			delete(s.last, p)
		}
	}
}
