package framework

import "time"

// Timings are the agent's periods and timeouts a test sets; a zero field
// leaves the agent's default.
type Timings struct {
	// SwimProbeInterval, SwimProbeTimeout and SwimPushPull are SWIM's
	// probe period, the wait for a direct answer, and how often record
	// versions are compared with a random site.
	SwimProbeInterval, SwimProbeTimeout, SwimPushPull time.Duration
	// SwimKeyPoll is how often the networks' SWIM key and trust Secrets
	// are read.
	SwimKeyPoll time.Duration
	// SiteProbeInterval and SiteProbeTimeout are the mutual-TLS probes of
	// the GridSites' gateways.
	SiteProbeInterval, SiteProbeTimeout time.Duration
	// Resync is how often everything is reconciled.
	Resync time.Duration
	// LeaseDuration, RenewDeadline and RetryPeriod are leader election's.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Fast are the timings of a site whose departures, rotations and
// failovers a test waits for: a fifth of the reference's, so that a site
// killed is suspected and declared dead in seconds (probe 1 s, 600 ms for
// a direct answer, suspect three probe periods), a rotated key or
// certificate is read within a second, and a standby leads within 4 s of
// its leader's death. Resync is the agent's floor.
var Fast = Timings{
	SwimProbeInterval: time.Second,
	SwimProbeTimeout:  600 * time.Millisecond,
	SwimPushPull:      2 * time.Second,
	SwimKeyPoll:       time.Second,
	SiteProbeInterval: time.Second,
	SiteProbeTimeout:  time.Second,
	Resync:            10 * time.Second,
	LeaseDuration:     4 * time.Second,
	RenewDeadline:     3 * time.Second,
	RetryPeriod:       time.Second,
}

// Flags are the agent's flags for the timings that are set.
func (tm Timings) Flags() []string {
	var out []string
	for _, f := range []struct {
		flag string
		d    time.Duration
	}{
		{"--swim-probe-interval", tm.SwimProbeInterval},
		{"--swim-probe-timeout", tm.SwimProbeTimeout},
		{"--swim-push-pull-interval", tm.SwimPushPull},
		{"--swim-key-poll-interval", tm.SwimKeyPoll},
		{"--site-probe-interval", tm.SiteProbeInterval},
		{"--site-probe-timeout", tm.SiteProbeTimeout},
		{"--resync-period", tm.Resync},
		{"--lease-duration", tm.LeaseDuration},
		{"--renew-deadline", tm.RenewDeadline},
		{"--retry-period", tm.RetryPeriod},
	} {
		if f.d != 0 {
			out = append(out, f.flag, f.d.String())
		}
	}
	return out
}
