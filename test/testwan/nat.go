package testwan

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
)

// Expose gives site i a load balancer address: the other sites reach it
// there, and nftables in its namespace translates the address to the one
// it binds (and back, on the replies), as kube-proxy does for a NodePort
// or a cloud load balancer with the client's address kept. The site
// advertises the returned address; nothing listens on it.
func (l *Lab) Expose(i int) (netip.Addr, error) {
	vip := hostAddr(ExposedPrefix, i)
	rules := fmt.Sprintf(`table ip gridsync-wan-lb {
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		ip daddr %s dnat to %s
	}
}
`, vip, l.addrs[i])
	if err := l.nft(i, rules); err != nil {
		return netip.Addr{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.owner[vip] = i
	l.exposed[i] = vip
	return vip, nil
}

// NoInbound makes site i one that dials out but cannot be dialled (behind
// a NAT or a firewall): every new flow that arrives is dropped, and only
// the answers to its own flows come in.
func (l *Lab) NoInbound(i int) error {
	return l.nft(i, fmt.Sprintf(`table inet gridsync-wan-in {
	chain input {
		type filter hook input priority filter; policy accept;
		iifname %q ct state new drop
	}
}
`, device))
}

// nft loads rules into site i's namespace.
func (l *Lab) nft(i int, rules string) error {
	cmd := exec.CommandContext(context.Background(), "ip", "netns", "exec", l.names[i], "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in site %d: %w: %s", i, err, out)
	}
	return nil
}
