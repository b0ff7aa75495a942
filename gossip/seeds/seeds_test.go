package seeds

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
		_, problems := Resolve(context.Background(), c, seeds, time.Second, 5*time.Second)
		require.Len(t, problems, 255)
	}
	require.EqualValues(t, 255, inner.calls.Load(), "one lookup per name in the TTL")
	now = now.Add(31 * time.Second)
	_, _ = Resolve(context.Background(), c, seeds[:1], time.Second, 5*time.Second)
	require.EqualValues(t, 256, inner.calls.Load(), "looked up again after the TTL")

	ok := &countingResolver{}
	c = NewCachingResolver(ok, 30*time.Second, func() time.Time { return now })
	for range 3 {
		addrs, problems := Resolve(context.Background(), c, []string{"seed.example:7946"}, time.Second, 5*time.Second)
		require.Empty(t, problems)
		require.Equal(t, []string{"127.0.0.9:7946"}, addrs)
	}
	require.EqualValues(t, 1, ok.calls.Load())
}

type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(ctx context.Context, _, host string) ([]netip.Addr, error) {
	if host == "slow.example" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

func TestResolve(t *testing.T) {
	r := fakeResolver{"two.example": {netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1")}}
	start := time.Now()
	addrs, problems := Resolve(context.Background(), r, []string{
		"127.0.0.1:7946", "[::1]:7946", "two.example:7946", "127.0.0.1:7946",
		"slow.example:7946", "nohost.example:7946", "noport", "127.0.0.1:0", "127.0.0.1:http",
	}, 100*time.Millisecond, time.Second)
	require.Less(t, time.Since(start), time.Second, "each entry has its own bound")
	require.Equal(t, []string{"127.0.0.1:7946", "127.0.0.2:7946", "[::1]:7946"}, addrs, "sorted and deduplicated")
	var entries []string
	for _, p := range problems {
		entries = append(entries, p.Entry)
	}
	require.Equal(t, []string{"127.0.0.1:0", "127.0.0.1:http", "nohost.example:7946", "noport", "slow.example:7946"}, entries)
}

func TestResolveAdvertise(t *testing.T) {
	r := fakeResolver{"agent.example": {netip.MustParseAddr("127.0.0.9")}}
	ap, err := ResolveAdvertise(context.Background(), r, "agent.example:7946")
	require.NoError(t, err)
	require.Equal(t, "127.0.0.9:7946", ap.String())
	_, err = ResolveAdvertise(context.Background(), r, "missing.example:7946")
	require.Error(t, err)
	_, err = ResolveAdvertise(context.Background(), r, "0.0.0.0:7946")
	require.Error(t, err)
}
