package record

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"testing"
	"time"

	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// BenchmarkVerifyRecord is what a receiver pays for a signed record: the
// signature check of a provider record (two providers, as the SWIM
// benchmark's sites gossip) against a certificate whose chain was
// verified before (a site signs every record with one certificate), and
// what signing adds to a record on the wire. It prints
//
//	swim-verify ns_per_record=<> bytes_per_record=<> unsigned_bytes_per_record=<> chain_verify_ns=<>
func BenchmarkVerifyRecord(b *testing.B) {
	const tombstoneTTL = 10 * time.Minute // the runtime's default
	now := time.Now()
	caPEM, caKey, err := sitetrust.NewCA(now, 24*time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	ca, err := sitetrust.ParseCA(caPEM, caKey)
	if err != nil {
		b.Fatal(err)
	}
	chain, key, err := ca.Issue("site-c", now, 24*time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	pair, err := tls.X509KeyPair(chain, key)
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	unsigned := Record{Network: "bench", Site: "site-c", Kind: KindProviders, Version: uint64(now.UnixNano()), Grid: "0f8fad5b-d9cb-469f-a165-70867728950e",
		Providers: []sites.Provider{
			{Name: "site-c-a", Models: []string{"llama-70b", "mixtral"}, Cluster: "c1", Phase: "Available"},
			{Name: "site-c-b", Models: []string{"gpt-oss"}, Cluster: "c2", Phase: "Available"},
		}}
	s, err := NewSigner(&pair)
	if err != nil {
		b.Fatal(err)
	}
	rec := unsigned
	if err := s.Sign(&rec); err != nil {
		b.Fatal(err)
	}
	trust := &NetworkTrust{Roots: roots, Chains: NewChainCache()}
	start := time.Now()
	if why := Check(trust, &rec, unsigned.Grid, now, tombstoneTTL); why != "" {
		b.Fatal(why)
	}
	chainNs := time.Since(start).Nanoseconds()
	for b.Loop() {
		if why := Check(trust, &rec, unsigned.Grid, now, tombstoneTTL); why != "" {
			b.Fatal(why)
		}
	}
	signedMsg, _ := EncodeDirectRecords([]Record{rec})
	unsignedMsg, _ := EncodeDirectRecords([]Record{unsigned})
	b.ReportMetric(float64(len(signedMsg)), "bytes/record")
	// b.Loop runs the benchmark function once: one line per run.
	fmt.Printf("swim-verify ns_per_record=%d bytes_per_record=%d unsigned_bytes_per_record=%d chain_verify_ns=%d\n",
		b.Elapsed().Nanoseconds()/int64(max(b.N, 1)), len(signedMsg), len(unsignedMsg), chainNs)
}
