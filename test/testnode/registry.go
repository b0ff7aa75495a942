package testnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/gridsync/gridsync/test/controlplane"
	"github.com/gridsync/gridsync/test/testnetns"
)

// Options changes how a node starts.
type Options struct {
	// Mirrors are registries the node pulls from: an image named under
	// one (a release's, ghcr.io/gridsync/...@sha256:...) is pulled,
	// where the project's images loaded at start are named under
	// gridsync.local and never pulled.
	Mirrors []Mirror
}

// Mirror serves the images named under Registry (ghcr.io, say) from a
// registry on the host's loopback, as a cluster's registry mirror does:
// containerd's hosts.toml for Registry names the mirror as its only
// server, so an image reference of the chart's resolves there and
// nothing is ever asked of Registry itself.
type Mirror struct {
	// Registry is the host the images are named under.
	Registry string
	// Upstream is the mirror's host:port on the host's loopback, served
	// over TLS. The node reaches it at the same address of its own
	// loopback, which the harness forwards to the host's: the
	// certificate's 127.0.0.1 holds on both.
	Upstream string
	// CA is the PEM the mirror's certificate is checked against.
	CA []byte
}

// registryHostsDir is containerd's registry configuration folder
// (config_path): a folder per registry host, each with a hosts.toml.
func (n *Node) registryHostsDir() string { return n.path("certs.d") }

// startMirrors opens each mirror's address inside the node's namespace,
// forwarded to the host's, and writes its hosts.toml.
func (n *Node) startMirrors(mirrors []Mirror) error {
	if err := os.MkdirAll(n.registryHostsDir(), 0o755); err != nil {
		return err
	}
	for _, m := range mirrors {
		host, port, err := net.SplitHostPort(m.Upstream)
		if err != nil {
			return fmt.Errorf("mirror of %s: %w", m.Registry, err)
		}
		if !net.ParseIP(host).IsLoopback() {
			return fmt.Errorf("mirror of %s: %s is not on loopback", m.Registry, m.Upstream)
		}
		ln, err := testnetns.Listen(testnetns.Path(n.Name), net.JoinHostPort(host, port))
		if err != nil {
			return fmt.Errorf("listen for the mirror of %s in the node's namespace: %w", m.Registry, err)
		}
		n.mirrors = append(n.mirrors, controlplane.NewProxyOn(ln, m.Upstream))
		dir := filepath.Join(n.registryHostsDir(), m.Registry)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		ca := filepath.Join(dir, "ca.pem")
		if err := os.WriteFile(ca, m.CA, 0o644); err != nil {
			return err
		}
		// server replaces the registry's own endpoint: a mirror that
		// fails is an error, never a fallback to the real registry.
		hosts := fmt.Sprintf("server = %q\nca = %q\ncapabilities = [\"pull\", \"resolve\"]\n", "https://"+m.Upstream, ca)
		if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Images are the references of the images containerd holds for the
// kubelet, loaded or pulled.
func (n *Node) Images(ctx context.Context) ([]string, error) {
	out, err := n.ctr(ctx, "images", "list", "--quiet")
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}
