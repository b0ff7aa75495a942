package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/trust/enrol"
)

func TestTheRegisterCommandsNeedTheirFlags(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	var out, errOut bytes.Buffer
	assert.Equal(t, 2, releaseName([]string{"--network", "n", "--namespace", "ns"}, &out, &errOut))
	assert.Contains(t, errOut.String(), "--network, --site and --namespace are required")
	errOut.Reset()
	assert.Equal(t, 2, releaseName([]string{"--network", "n", "--site", "Not A Name", "--namespace", "ns"}, &out, &errOut))
	assert.NotEmpty(t, errOut.String())
	errOut.Reset()
	assert.Equal(t, 2, registeredSites([]string{"--network", "n"}, &out, &errOut))
	assert.Contains(t, errOut.String(), "--network and --namespace are required")
	assert.Equal(t, 0, registeredSites([]string{"-h"}, &out, &errOut))
	assert.Empty(t, out.String())
}

func TestTheRegisterIsATable(t *testing.T) {
	enrolled := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	writeRegister(&out, []enrol.RegisteredSite{
		{SiteRecord: enrol.SiteRecord{Network: "n", Site: "site-a", Serial: "5eed", KeyFingerprint: strings.Repeat("ab", 32),
			NotAfter: enrolled.Add(90 * 24 * time.Hour), EnrolledAt: enrolled, TokenID: "0123456789ab"}},
		{SiteRecord: enrol.SiteRecord{Network: "n", Site: "site-b", Serial: "f00d", KeyFingerprint: strings.Repeat("cd", 32),
			NotAfter: enrolled}, Evicted: true},
		{SiteRecord: enrol.SiteRecord{Network: "n", Site: "site-c", KeyFingerprint: strings.Repeat("ef", 32), EnrolledAt: enrolled, TokenID: "ba9876543210"}},
	}, true)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 4)
	assert.Equal(t, []string{"SITE", "KEY", "(SHA-256)", "SERIAL", "ENROLLED", "AT", "TOKEN", "ID", "NOT", "AFTER", "EVICTED"}, strings.Fields(lines[0]))
	assert.Equal(t, []string{"site-a", "abababababababab…", "5eed", "2026-03-01T09:00:00Z", "0123456789ab", "2026-05-30T09:00:00Z", "no"}, strings.Fields(lines[1]))
	assert.Equal(t, []string{"site-b", "cdcdcdcdcdcdcdcd…", "f00d", "unknown", "unknown", "2026-03-01T09:00:00Z", "yes"}, strings.Fields(lines[2]),
		"a record from before the register: its enrolment unknown")
	assert.Equal(t, []string{"site-c", "efefefefefefefef…", "-", "2026-03-01T09:00:00Z", "ba9876543210", "-", "no"}, strings.Fields(lines[3]),
		"an enrolment under way: no certificate yet")

	out.Reset()
	writeRegister(&out, []enrol.RegisteredSite{{SiteRecord: enrol.SiteRecord{Network: "n", Site: "site-a", Serial: "5eed", KeyFingerprint: strings.Repeat("ab", 32)}}}, false)
	lines = strings.Split(strings.TrimSpace(out.String()), "\n")
	assert.Equal(t, "unknown", strings.Fields(lines[1])[6], "the network could not be read: its evictions unknown")
}

func TestAReleaseSaysWhatItReleased(t *testing.T) {
	var out bytes.Buffer
	writeReleased(&out, enrol.Released{
		Record: enrol.SiteRecord{Network: "n", Site: "site-a", Serial: "5eed", KeyFingerprint: strings.Repeat("ab", 32),
			EnrolledAt: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC), TokenID: "0123456789ab"},
		Pending: []enrol.PendingToken{{ID: "ba9876543210", Expires: time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)}},
	})
	assert.Equal(t, "released site site-a of network n: key sha256:abababababababab…, serial 5eed, enrolled 2026-03-01T09:00:00Z with token 0123456789ab\n"+
		"the certificates issued to site-a no longer renew; a token for site-a (gridsync-agent enroll-token) enrols the name under a new key\n"+
		"token ba9876543210 for site-a, not yet spent, enrols it from now on (until 2026-03-02T09:00:00Z)\n", out.String())
	assert.NotContains(t, out.String(), strings.Repeat("ab", 32), "the fingerprint's start only")

	out.Reset()
	writeReleased(&out, enrol.Released{Record: enrol.SiteRecord{Network: "n", Site: "site-b"}})
	assert.Contains(t, out.String(), "released site site-b of network n (its record did not parse)")
}

// A negative --lifetime is refused before the cluster is asked, never
// taken for the default.
func TestIssueInfraCertRefusesANegativeLifetime(t *testing.T) {
	var out, errOut bytes.Buffer
	assert.Equal(t, 2, issueInfraCert([]string{"--network", "n", "--dns-name", "db.example.com", "--namespace", "ns", "--secret", "s",
		"--lifetime", "-24h", "--kubeconfig", "/nonexistent"}, &out, &errOut))
	assert.Contains(t, errOut.String(), "--lifetime -24h0m0s is negative")
	assert.Empty(t, out.String())
}
