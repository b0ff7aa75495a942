package membership

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type countingResolver struct {
	calls atomic.Int32
	fail  bool
}

func (c *countingResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	c.calls.Add(1)
	if c.fail {
		return nil, errors.New("no such host")
	}
	return []netip.Addr{netip.MustParseAddr("127.0.0.9")}, nil
}

// 255 unresolvable seeds cost 255 lookups per TTL, not per reconcile; a
// lookup is made again once the TTL has passed.
func TestCachingResolverBoundsLookups(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	inner := &countingResolver{fail: true}
	c := NewCachingResolver(inner, 30*time.Second, func() time.Time { return now })
	var seeds []string
	for i := range 255 {
		seeds = append(seeds, "seed-"+string(rune('a'+i%26))+string(rune('a'+i/26))+".invalid:7946")
	}
	for range 10 {
		_, problems := ResolveSeeds(context.Background(), c, seeds, time.Second, 5*time.Second)
		require.Len(t, problems, 255)
	}
	require.EqualValues(t, 255, inner.calls.Load(), "one lookup per name in the TTL")
	now = now.Add(31 * time.Second)
	_, _ = ResolveSeeds(context.Background(), c, seeds[:1], time.Second, 5*time.Second)
	require.EqualValues(t, 256, inner.calls.Load(), "looked up again after the TTL")

	ok := &countingResolver{}
	c = NewCachingResolver(ok, 30*time.Second, func() time.Time { return now })
	for range 3 {
		addrs, problems := ResolveSeeds(context.Background(), c, []string{"seed.example:7946"}, time.Second, 5*time.Second)
		require.Empty(t, problems)
		require.Equal(t, []string{"127.0.0.9:7946"}, addrs)
	}
	require.EqualValues(t, 1, ok.calls.Load())
}
