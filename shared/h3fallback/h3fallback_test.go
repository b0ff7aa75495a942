package h3fallback

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// HTTP/3 first; after a failure HTTPS alone for For, then HTTP/3 again;
// each peer on its own; a success ends the fallback at once.
func TestAPeerIsSpokenToOverHTTPSAloneForAWhileAfterQUICFailed(t *testing.T) {
	now := time.Unix(1000, 0)
	m := &Memory{For: time.Minute}
	assert.Equal(t, H3, m.First("a", now))

	m.Failed("a", now)
	assert.Equal(t, HTTPS, m.First("a", now))
	assert.Equal(t, HTTPS, m.First("a", now.Add(59*time.Second)))
	assert.Equal(t, H3, m.First("b", now), "another peer")
	assert.Equal(t, H3, m.First("a", now.Add(time.Minute)), "the fallback ran out")
	assert.Equal(t, H3, m.First("a", now), "and is forgotten")

	m.Failed("a", now)
	m.Clear("a")
	assert.Equal(t, H3, m.First("a", now))
}

// A fallback that ran out is dropped when another starts: peers never
// spoken to again are not held.
func TestFallbacksThatRanOutAreDropped(t *testing.T) {
	now := time.Unix(1000, 0)
	m := &Memory{For: time.Minute}
	m.Failed("gone", now)
	m.Failed("b", now.Add(2*time.Minute))
	assert.NotContains(t, m.until, "gone")
	assert.Contains(t, m.until, "b")
}
