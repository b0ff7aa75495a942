package trust

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/probe"
	membership "github.com/gridsync/gridsync/gossip"
	gridsites "github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/measure"
	"github.com/gridsync/gridsync/test/testgateway"
	"github.com/gridsync/gridsync/trust/enrol"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// enrolSites is how many sites enrol, one after another.
var enrolSites = measure.Size(10, 2)

// BenchmarkEnrol measures a new site's way into the grid, one site after
// another: from the issuer's operator making its token to the site's
// GridSite Active at the issuer. In between: the token stored hashed in
// the issuer's cluster (a real kube-apiserver), the site's key and
// certificate request, the enrolment over TLS to the issuer's server (the
// agent's enrol server with the agent's own CA lookup, on loopback), the
// certificate checked, the site's membership signing its records with it
// and joining over SWIM (the issuer verifies them), its gateway
// presenting it, the issuer's controller discovering the site and its
// mutual-TLS probe in SPIFFE mode. The new site's own controller writing
// its Secret (one apply) is left out: every site here shares the one API
// server, where a GridNetwork can only be the issuer's. It prints
//
//	enrol sites=10 active_after_ms=<worst> active_after_p50_ms=<>
func BenchmarkEnrol(b *testing.B) {
	for b.Loop() {
		runEnrol(b)
	}
}

func runEnrol(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const network = "enrol-bench"
	// The agent's controller runs in this process, with the site's RBAC.
	s := framework.NewSite(b, cp, framework.SiteOptions{Prefix: "enrol"})
	agentNS, credNS, admin, cfg := s.AgentNS, s.Namespace(), s.Admin, s.Config
	measure.Must(b, cp.AgentTrustSecrets(ctx, agentNS, credNS, "grid-ca", "site-cert"))
	measure.Must(b, admin.Create(ctx, &v1alpha1.GridNetwork{
		ObjectMeta: metav1.ObjectMeta{Name: network, Labels: map[string]string{controller.AutoDiscoverSitesLabel: "true"}},
		Spec: v1alpha1.GridNetworkSpec{
			TLS: &v1alpha1.GridTLS{
				CASecretRef:     &v1alpha1.NamespacedName{Name: "grid-ca", Namespace: credNS},
				SiteSecretRef:   &v1alpha1.NamespacedName{Name: "site-cert", Namespace: credNS},
				SiteCertificate: &v1alpha1.SiteCertificate{Mode: v1alpha1.SiteCertificateIssuer},
			},
			PeerTrust: &v1alpha1.PeerTrust{Mode: "spiffe"},
		},
	}))

	// The issuer: its membership, its controller, its enrol server.
	key := make([]byte, 32)
	// Every site here shares one source address, which a real grid's
	// sites never do: the per-source caps are raised to the site's own.
	gate := membership.DefaultGateLimits()
	gate.PushPullRate, gate.PushPullBurst = gate.SitePushPullRate, gate.SitePushPullBurst
	gate.MaxStreamsPerAddr, gate.BufferBytesPerAddr = gate.MaxStreams, gate.BufferBytes
	issuerSwim, err := membership.New(ctx, membership.Config{Site: "issuer", BindAddr: "127.0.0.1:0", EnvKey: key, Gate: gate,
		ProbeInterval: time.Second, ProbeTimeout: 600 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	measure.Must(b, err)
	mgr, err := controller.NewManager(cfg, controller.ManagerOptions{Options: controller.Options{
		Namespaces: []string{credNS}, Logger: slog.New(slog.DiscardHandler), Membership: issuerSwim,
		SiteName: "issuer", SiteProbeInterval: probeInterval, SiteProbeTimeout: time.Second,
		ProbeDestinations: probe.Destinations{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
	}, SeveralPerProcess: true}) // the trust and enrolment benchmarks run in one process
	measure.Must(b, err)
	measure.Must(b, mgr.Add(issuerSwim))
	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			b.Log(err)
		}
	}()
	var caSecret, siteSecret corev1.Secret
	for admin.Get(ctx, types.NamespacedName{Namespace: credNS, Name: "site-cert"}, &siteSecret) != nil {
		time.Sleep(20 * time.Millisecond)
	}
	measure.Must(b, admin.Get(ctx, types.NamespacedName{Namespace: credNS, Name: "grid-ca"}, &caSecret))
	ca, err := sitetrust.ParseCA(caSecret.Data["tls.crt"], caSecret.Data["tls.key"])
	measure.Must(b, err)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	serving, err := tls.X509KeyPair(siteSecret.Data["tls.crt"], siteSecret.Data["tls.key"])
	measure.Must(b, err)
	tokens := &enrol.Tokens{API: admin, Namespace: agentNS}
	srv, err := enrol.NewServer(controller.EnrolmentAuthority(admin, nil), tokens, time.Hour, slog.New(slog.DiscardHandler), nil)
	measure.Must(b, err)
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	measure.Must(b, err)
	hs := &http.Server{Handler: srv, TLSConfig: &tls.Config{Certificates: []tls.Certificate{serving}, ClientCAs: roots, ClientAuth: tls.VerifyClientCertIfGiven}}
	go func() { _ = hs.ServeTLS(ln, "", "") }()
	defer func() { _ = hs.Close() }()
	measure.Until(b, 30*time.Second, 20*time.Millisecond, "the issuer's membership running", func() bool { return issuerSwim.Status().Running })

	var took []float64
	c := enrol.Client{}
	for i := range enrolSites {
		site := fmt.Sprintf("new-%d", i)
		start := time.Now()
		token, err := tokens.Add(ctx, network, site, time.Hour, time.Now())
		measure.Must(b, err)
		siteKey, csr, err := enrol.NewKey()
		measure.Must(b, err)
		chain, err := c.Request(ctx, enrol.Issuer{Address: ln.Addr().String(), Site: "issuer"}, roots,
			enrol.Request{Network: network, Site: site, Token: token, CSR: string(csr)}, nil, siteKey)
		measure.Must(b, err)
		keyDER, err := x509.MarshalPKCS8PrivateKey(siteKey)
		measure.Must(b, err)
		pair, err := tls.X509KeyPair(chain, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
		measure.Must(b, err)
		gw, err := testgateway.Start("127.0.0.1:0")
		measure.Must(b, err)
		defer gw.Close()
		gw.Present(pair, roots)
		rt, err := membership.New(ctx, membership.Config{Site: site, BindAddr: "127.0.0.1:0", EnvKey: key, Gate: gate,
			ProbeInterval: time.Second, ProbeTimeout: 600 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		measure.Must(b, err)
		rctx, rstop := context.WithCancel(ctx)
		defer rstop()
		go func() { _ = rt.Start(rctx) }()
		rt.SetGatewayAddress(gw.Addr)
		rt.SetIdentity(network, gridsites.Identity{Roots: roots, Signer: &pair})
		measure.Must(b, rt.Publish(network, string(chain), nil))
		measure.Until(b, 10*time.Second, 5*time.Millisecond, site+" running", func() bool { return rt.Status().Running })
		if res := rt.AnnounceSeeds(network, []string{issuerSwim.AdvertiseAddr()}); len(res.Failed) > 0 {
			b.Fatalf("%s: %v", site, res.Failed[0].Err)
		}
		var gs v1alpha1.GridSite
		measure.Until(b, 30*time.Second, 5*time.Millisecond, site+" Active at the issuer", func() bool {
			return admin.Get(ctx, types.NamespacedName{Name: network + "-" + site}, &gs) == nil && gs.Status.Phase == sitetrust.PhaseActive
		})
		took = append(took, float64(time.Since(start).Microseconds())/1000)
	}
	fmt.Printf("enrol sites=%d active_after_ms=%.0f active_after_p50_ms=%.0f\n", enrolSites, measure.Percentile(took, 100), measure.Percentile(took, 50))
}
