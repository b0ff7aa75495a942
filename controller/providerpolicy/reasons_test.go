package providerpolicy_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/controller/providerpolicy"
	"github.com/gridsync/gridsync/trust/endpointtls"
)

// documentedReasons reads the reasons of README.md's table, in the order
// of its rows (a cell may name several).
func documentedReasons(t *testing.T, readme string) []string {
	t.Helper()
	const header = "| check | phase | reason | condition |"
	lines := strings.Split(readme, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.TrimSpace(l) == header })
	require.GreaterOrEqual(t, start, 0, "README.md has no table headed %q", header)
	quoted := regexp.MustCompile("`([^`]+)`")
	var reasons []string
	for _, line := range lines[start+2:] {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		require.Len(t, cells, 4, "row %q", line)
		names := quoted.FindAllStringSubmatch(cells[2], -1)
		require.NotEmpty(t, names, "row %q names no reason", line)
		for _, m := range names {
			reasons = append(reasons, m[1])
		}
	}
	return reasons
}

// The table users read and the reasons the code writes are the same list,
// in the same order: a reason added on one side only fails here.
func TestTheReadmeTableListsEveryReason(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	documented := documentedReasons(t, string(readme))
	code := providerpolicy.Reasons()
	for _, r := range code {
		assert.Contains(t, documented, r, "reason %s is written by the code but not in README.md's table", r)
	}
	for _, r := range documented {
		assert.Contains(t, code, r, "README.md's table names %s, which Reasons() does not list", r)
	}
	assert.Equal(t, code, documented, "README.md's table lists the reasons in the order of Reasons()")
}

// The parser finds a reason on either side missing, so the test above can
// fail.
func TestTheReadmeParserSeesEveryRow(t *testing.T) {
	table := "intro\n\n| check | phase | reason | condition |\n|---|---|---|---|\n" +
		"| a | Pending | `One` | `Ready` False |\n| b | any | `Two`, `Three` | `Hosted` True |\n\nafter | `Four` |\n"
	assert.Equal(t, []string{"One", "Two", "Three"}, documentedReasons(t, table))
}

func TestReasonsAreDistinctAndNotEmpty(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range providerpolicy.Reasons() {
		assert.NotEmpty(t, r)
		assert.False(t, seen[r], "%s listed twice", r)
		seen[r] = true
	}
}

// Every refusal has its own reason for each kind of request, listed in
// Reasons(); every reason endpointtls gives is a refusal.
func TestEveryRefusalHasItsReasons(t *testing.T) {
	refusals := []providerpolicy.Refusal{providerpolicy.RefusalAuthCredentialUnavailable, providerpolicy.RefusalPlaintext}
	for _, r := range endpointtls.Reasons() {
		refusal, ok := providerpolicy.TLSRefusal(r)
		require.True(t, ok, "endpointtls reason %s", r)
		assert.Equal(t, string(r), string(refusal))
		refusals = append(refusals, refusal)
	}
	_, ok := providerpolicy.TLSRefusal("TlsSomethingElse")
	assert.False(t, ok)

	reasons := providerpolicy.Reasons()
	seen := map[string]bool{}
	for _, r := range refusals {
		for _, reason := range []string{providerpolicy.HealthCheckReason(r), providerpolicy.MetricsReason(r)} {
			assert.Contains(t, reasons, reason)
			assert.False(t, seen[reason], "%s given to two refusals", reason)
			seen[reason] = true
		}
		// The strings users see: the kind of request, then the refusal.
		assert.Equal(t, "HealthCheck"+string(r), providerpolicy.HealthCheckReason(r))
		assert.Equal(t, "Metrics"+string(r), providerpolicy.MetricsReason(r))
	}
	assert.Equal(t, providerpolicy.ReasonHealthCheckFailing, providerpolicy.HealthCheckReason("Unknown"))
	assert.Equal(t, providerpolicy.ReasonScrapeFailed, providerpolicy.MetricsReason("Unknown"))
}
