package overlaysync_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
)

// protocolRecorder notes the protocol of every response.
type protocolRecorder struct {
	next   http.RoundTripper
	mu     sync.Mutex
	protos map[string]int
}

func (p *protocolRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := p.next.RoundTrip(req)
	if err == nil {
		p.mu.Lock()
		p.protos[resp.Proto]++
		p.mu.Unlock()
	}
	return resp, err
}

// The watch runs over HTTP/1.1 even though the API server offers HTTP/2:
// a single long watch gains nothing from multiplexing, and HTTP/2's extra
// goroutine hand-off, flow control and framing cost the sidecar about a
// tenth of its CPU per update in the delivery benchmark.
func TestWatchesOverHTTP1(t *testing.T) {
	g := newGateway(t)
	rec := &protocolRecorder{protos: map[string]int{}}
	cfg := rest.CopyConfig(g.saConfig)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		rec.next = rt
		return rec
	})
	r := g.start(g.options(), cfg)
	doc, _ := g.envelopeFor(1)
	r.waitObserved(t, g.putEnvelope(doc))

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.NotEmpty(t, rec.protos)
	assert.Equal(t, []string{"HTTP/1.1"}, keys(rec.protos), "responses by protocol: %v", rec.protos)
}

func keys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
