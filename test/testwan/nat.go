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
	vip := l.ExposedAddr(i)
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

// Forward is one port of a site's load balancer address and where it
// leads behind the site.
type Forward struct {
	// Proto is "tcp" or "udp".
	Proto string
	Port  uint16
	// To is the address behind the site: a pod of a node, say.
	To netip.AddrPort
}

// ExposePorts gives site i a load balancer address whose ports lead to
// addresses behind the site (a node's pods, as a cloud load balancer or a
// NodePort leads to them) and returns it. Called again, it replaces the
// forwards, as a load balancer follows its endpoints. Pair it with
// Masquerade so that the pods' own flows leave with the site's address.
func (l *Lab) ExposePorts(i int, forwards []Forward) (netip.Addr, error) {
	vip := l.ExposedAddr(i)
	var rules strings.Builder
	for _, f := range forwards {
		if f.Proto != "tcp" && f.Proto != "udp" {
			return netip.Addr{}, fmt.Errorf("forward of port %d: protocol %q, not tcp or udp", f.Port, f.Proto)
		}
		fmt.Fprintf(&rules, "\t\tip daddr %s %s dport %d dnat to %s\n", vip, f.Proto, f.Port, f.To)
	}
	// The table declared, deleted and declared again in one transaction:
	// the forwards are replaced at once, never half.
	err := l.nft(i, fmt.Sprintf(`table ip gridsync-wan-ports {}
delete table ip gridsync-wan-ports
table ip gridsync-wan-ports {
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
%s	}
}
`, rules.String()))
	if err != nil {
		return netip.Addr{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.owner[vip] = i
	l.exposed[i] = vip
	return vip, nil
}

// Masquerade makes the flows of the addresses in from (a node's pod
// network) leave site i with the site's own address, as a node's SNAT
// does, and lets the site forward them: the other sites see the node,
// never its pods, and their answers find the way back.
func (l *Lab) Masquerade(i int, from netip.Prefix) error {
	cmd := exec.CommandContext(context.Background(), "ip", "netns", "exec", l.names[i], "sysctl", "-qw", "net.ipv4.ip_forward=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("forwarding in site %d: %w: %s", i, err, out)
	}
	return l.nft(i, fmt.Sprintf(`table ip gridsync-wan-snat {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr %s oifname %q masquerade
	}
}
`, from, device))
}

// ExposedAddr is the load balancer address Expose or ExposePorts gives
// site i, known before either is called (a site advertises it from the
// start).
func (l *Lab) ExposedAddr(i int) netip.Addr { return hostAddr(ExposedPrefix, i) }
