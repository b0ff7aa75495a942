// Package seeds resolves the seed entries of a network (IP:port,
// [IPv6]:port or hostname:port) and the agent's advertise address, each
// name lookup bounded, with a small cache so that one slow or failing name
// server does not hold every reconcile.
package seeds

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Resolution bounds: one slow name server delays a seed, not the
// reconcile.
const (
	DefaultTimeout      = 2 * time.Second
	DefaultTotalTimeout = 5 * time.Second
)

// Resolver looks up host names; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Problem is an entry that was skipped, and why.
type Problem struct {
	Entry string
	Err   error
}

// Resolve resolves seed entries (IP:port, [IPv6]:port or
// hostname:port), each independently and with its own bound inside a
// total bound, into sorted, deduplicated IP:port addresses. Entries that
// are invalid or do not resolve are returned as problems and skipped.
func Resolve(ctx context.Context, r Resolver, entries []string, perEntry, total time.Duration) ([]string, []Problem) {
	if r == nil {
		r = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, total)
	defer cancel()
	var (
		mu       sync.Mutex
		addrs    []string
		problems []Problem
		wg       sync.WaitGroup
	)
	for _, entry := range entries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := resolveOne(ctx, r, entry, perEntry)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				problems = append(problems, Problem{Entry: entry, Err: err})
				return
			}
			addrs = append(addrs, got...)
		}()
	}
	wg.Wait()
	slices.Sort(addrs)
	slices.SortFunc(problems, func(a, b Problem) int {
		if a.Entry < b.Entry {
			return -1
		}
		if a.Entry > b.Entry {
			return 1
		}
		return 0
	})
	return slices.Compact(addrs), problems
}

// resolveOne resolves one host:port entry into IP:port addresses.
func resolveOne(ctx context.Context, r Resolver, entry string, timeout time.Duration) ([]string, error) {
	host, portText, err := net.SplitHostPort(entry)
	if err != nil {
		return nil, fmt.Errorf("not host:port, IP:port or [IPv6]:port: %w", err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return nil, fmt.Errorf("port %q is not a number from 1 to 65535", portText)
	}
	if host == "" {
		return nil, fmt.Errorf("no host")
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return nil, fmt.Errorf("an address with a zone is not routable between sites")
		}
		return []string{net.JoinHostPort(ip.Unmap().String(), portText)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("resolve %s: no address", host)
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, net.JoinHostPort(ip.Unmap().String(), portText))
	}
	return out, nil
}

// ResolveAdvertise resolves the address a site tells its peers, which must
// name exactly one usable address: the first one the resolver gives.
func ResolveAdvertise(ctx context.Context, r Resolver, entry string) (netip.AddrPort, error) {
	if r == nil {
		r = net.DefaultResolver
	}
	addrs, err := resolveOne(ctx, r, entry, DefaultTimeout)
	if err != nil {
		return netip.AddrPort{}, err
	}
	ap, err := netip.ParseAddrPort(addrs[0])
	if err != nil {
		return netip.AddrPort{}, err
	}
	if ap.Addr().IsUnspecified() {
		return netip.AddrPort{}, fmt.Errorf("%s is not an address peers can reach", entry)
	}
	return ap, nil
}

// CachingResolver remembers what another resolver answered, failures
// included, for a bounded time and a bounded number of names: a network
// with hundreds of unresolvable seeds costs one lookup per name per TTL,
// not one per reconcile.
type CachingResolver struct {
	inner Resolver
	ttl   time.Duration
	max   int
	now   func() time.Time

	mu      sync.Mutex
	entries map[string]cachedLookup
}

type cachedLookup struct {
	addrs []netip.Addr
	err   error
	until time.Time
}

// DefaultCacheTTL is how long a seed lookup is reused: a moved seed
// is noticed within it.
const DefaultCacheTTL = 30 * time.Second

// NewCachingResolver wraps inner (the system's when nil).
func NewCachingResolver(inner Resolver, ttl time.Duration, now func() time.Time) *CachingResolver {
	if inner == nil {
		inner = net.DefaultResolver
	}
	if now == nil {
		now = time.Now
	}
	return &CachingResolver{inner: inner, ttl: ttl, max: 4096, now: now, entries: map[string]cachedLookup{}}
}

func (c *CachingResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	key := network + "/" + host
	now := c.now()
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && now.Before(e.until) {
		return slices.Clone(e.addrs), e.err
	}
	addrs, err := c.inner.LookupNetIP(ctx, network, host)
	if ctx.Err() != nil && err != nil {
		return addrs, err // the caller gave up: not the name's answer
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.max {
		for k, old := range c.entries {
			if !now.Before(old.until) {
				delete(c.entries, k)
			}
		}
		for k := range c.entries {
			if len(c.entries) < c.max {
				break
			}
			delete(c.entries, k)
		}
	}
	c.entries[key] = cachedLookup{addrs: slices.Clone(addrs), err: err, until: now.Add(c.ttl)}
	return addrs, err
}
