// Command gridsync-standin-gateway stands in for the Praxis gateway in the
// node tests: it reads the routing overlay through the folder the pod
// mounts, as Praxis does, validates every read with the gateway's contract,
// and opens its port (what the chart's readiness probe checks; the first
// listener of its Praxis config) only once a valid overlay is there, or at
// once when no overlay folder is mounted at all. GET /state tells what it has read: the revision
// it serves, how many reads were invalid, and for the TLS identity how many
// reads found a certificate and key that do not match. It never serves
// traffic. With --grid-listen it also serves the grid listener: the mutual
// TLS of the site identity, which a remote site's trust probe reaches.
package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/shared/publish"
)

// State is what GET /state answers.
type State struct {
	// Revision is the last valid overlay read; empty before the first.
	Revision string `json:"revision"`
	// Reads counts the overlay reads; Invalid those that found a file that
	// is not a valid envelope (a torn or bad file would be one).
	Reads   int64 `json:"reads"`
	Invalid int64 `json:"invalid"`
	// Identity is the SHA-256 of the last matched certificate read, empty
	// before the first; IdentityTorn counts reads of a certificate and a
	// key that do not belong together.
	Identity     string `json:"identity"`
	IdentityTorn int64  `json:"identityTorn"`
	// ReadySince is when the port opened.
	ReadySince time.Time `json:"readySince"`
}

func main() {
	fs := flag.NewFlagSet("gridsync-standin-gateway", flag.ExitOnError)
	config := fs.String("config", "", "Praxis's configuration file: the first listener's address is where it listens")
	overlay := fs.String("overlay", "/etc/praxis/routing/routing-overlay.json", "the routing overlay file")
	identityDir := fs.String("identity-dir", "/etc/praxis/routing/identity", "the folder of the published TLS identity")
	listen := fs.String("listen", ":8080", "where to listen once a valid overlay is read, when --config names no listener")
	interval := fs.Duration("interval", 10*time.Millisecond, "how often the files are read")
	gridListen := fs.String("grid-listen", "", "where to serve the grid listener (mutual TLS with the site identity of --grid-tls-dir, what a remote site's trust probe reaches); empty: none")
	gridTLSDir := fs.String("grid-tls-dir", "/etc/praxis/tls", "the site identity's folder: tls.crt, tls.key and ca.crt (the chart's gridIdentity projection)")
	exitAtOnce := fs.Bool("exit-at-once", false, "exit 0 at once: an init container that gates on nothing (the node benchmark's floor)")
	// Praxis's own flag, which the upstream chart's values pass (args);
	// the stand-in prints nothing it would shape.
	_ = fs.String("log-format", "text", "Praxis's log format (json or text); accepted and unused")
	_ = fs.Parse(os.Args[1:])
	if *exitAtOnce {
		return
	}

	if addr := listenerOf(*config); addr != "" {
		*listen = addr
	}
	if *gridListen != "" {
		go func() {
			if err := serveGrid(context.Background(), *gridListen, *gridTLSDir); err != nil {
				fmt.Fprintln(os.Stderr, "grid listener:", err)
				os.Exit(1)
			}
		}()
	}
	if err := run(*overlay, *identityDir, *listen, *interval); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(overlay, identityDir, listen string, interval time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	g := &gateway{overlay: overlay, identityDir: identityDir}
	return g.run(ctx, listen, interval)
}

// listenerOf is the address of the first listener of a Praxis config
// (listeners: [{name, address}]), "" when there is none to read.
func listenerOf(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var cfg struct {
		Listeners []struct {
			Address string `yaml:"address"`
		} `yaml:"listeners"`
	}
	if yaml.Unmarshal(data, &cfg) != nil || len(cfg.Listeners) == 0 {
		return ""
	}
	return cfg.Listeners[0].Address
}

type gateway struct {
	overlay, identityDir string

	mu    sync.Mutex
	state State
}

func (g *gateway) run(ctx context.Context, listen string, interval time.Duration) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var srv *http.Server
	served := make(chan error, 1)
	// A gateway given no overlay folder at all (no routing overlay
	// configured) serves its static config at once, as Praxis does.
	_, err := os.Stat(filepath.Dir(g.overlay))
	noOverlay := errors.Is(err, os.ErrNotExist)
	for {
		g.read()
		if srv == nil && (noOverlay || g.snapshot().Revision != "") {
			ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", listen)
			if err != nil {
				return err
			}
			g.mu.Lock()
			g.state.ReadySince = time.Now()
			g.mu.Unlock()
			fmt.Println("standin-gateway: listening on", listen, "overlay revision", g.snapshot().Revision)
			srv = &http.Server{Handler: http.HandlerFunc(g.serveState), ReadHeaderTimeout: 5 * time.Second}
			go func() { served <- srv.Serve(ln) }()
		}
		select {
		case <-ctx.Done():
			if srv != nil {
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				return srv.Shutdown(sctx)
			}
			return nil
		case err := <-served:
			return err
		case <-tick.C:
		}
	}
}

func (g *gateway) snapshot() State {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state
}

// read reads the overlay and the identity once each, as the gateway does:
// the file by its path, the identity's two files from one generation.
func (g *gateway) read() {
	data, err := os.ReadFile(g.overlay)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err == nil {
		g.state.Reads++
		res, verr := envelope.Validate(data, envelope.Options{})
		if verr != nil {
			g.state.Invalid++
		} else {
			g.state.Revision = res.Revision
		}
	}
	cert, key, cerr, kerr := readIdentity(g.identityDir)
	if errors.Is(cerr, os.ErrNotExist) || errors.Is(kerr, os.ErrNotExist) {
		return
	}
	if _, err := tls.X509KeyPair(cert, key); err != nil || cerr != nil || kerr != nil {
		g.state.IdentityTorn++
		return
	}
	sum := sha256.Sum256(cert)
	g.state.Identity = hex.EncodeToString(sum[:])
}

// readIdentity reads tls.crt and tls.key of one generation of a folder in
// the kubelet's atomic writer layout, as a gateway must: ..data is resolved
// once and both files are read from the generation folder it names. The
// visible names are links through ..data, each resolved when it is opened:
// two opens one after the other can straddle a swap of ..data and pair a
// new certificate with the old key. Retrying until the pair matches was the
// other way; it would also retry away a mismatched pair the publisher put
// into one generation, which is what IdentityTorn is there to count. Read
// this way, a mismatch is always the publisher's. A generation removed
// between the readlink and the reads (a newer one replaced it) is missing,
// not torn: the next read finds the newer one. Without ..data (plain
// files) the names are read as they are.
func readIdentity(dir string) (cert, key []byte, cerr, kerr error) {
	dir = generation(dir)
	cert, cerr = os.ReadFile(filepath.Join(dir, "tls.crt"))
	key, kerr = os.ReadFile(filepath.Join(dir, "tls.key"))
	return cert, key, cerr, kerr
}

// generation is the folder of dir's current generation (where ..data
// points), or dir itself when it has none.
func generation(dir string) string {
	gen, err := os.Readlink(filepath.Join(dir, publish.DataLink))
	if err != nil {
		return dir
	}
	if !filepath.IsAbs(gen) {
		gen = filepath.Join(dir, gen)
	}
	return gen
}

func (g *gateway) serveState(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(g.snapshot())
}
