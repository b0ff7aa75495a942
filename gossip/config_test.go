package gossip

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewRefusesAnUnusableAdvertiseAddressOrSiteName(t *testing.T) {
	r := staticResolver{"agent.example": {netip.MustParseAddr("127.0.0.9")}}
	_, err := New(context.Background(), Config{Site: "a", BindAddr: "127.0.0.1:0", AdvertiseAddr: "missing.example:1", Resolver: r})
	require.ErrorContains(t, err, "advertise")
	_, err = New(context.Background(), Config{Site: "a", BindAddr: "0.0.0.0:7946"})
	require.ErrorContains(t, err, "advertise")
	_, err = New(context.Background(), Config{Site: "Not_A_Label", BindAddr: "127.0.0.1:7946"})
	require.ErrorContains(t, err, "site name")
}

// staticResolver resolves the names it holds and no other.
type staticResolver map[string][]netip.Addr

func (s staticResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := s[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}
