package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/gridsync/gridsync/hack/release/publish"
	"github.com/gridsync/gridsync/hack/release/sign"
)

func publishCommand(args []string) error {
	fs := flag.NewFlagSet("publish", flag.ExitOnError)
	release := fs.String("release", "", "the folder `make release` wrote")
	registry := fs.String("registry", "", "host[:port] of the registry to push to, instead of the one the images are named under")
	caFile := fs.String("ca", "", "a PEM file of CAs the registry's certificate is checked against, beside the system's")
	insecure := fs.Bool("insecure", false, "speak plain HTTP to the registry")
	record := fs.String("record", "", "a file to write what was pushed to, as JSON")
	key := fs.String("key", "", "the private key to sign with: cosign's (cosign generate-key-pair; its password in $COSIGN_PASSWORD) or an unencrypted PKCS #8 PEM")
	unsigned := fs.Bool("unsigned", false, "publish without signatures (without -key, publish refuses)")
	_ = fs.Parse(args)
	if *release == "" || fs.NArg() != 0 {
		usage()
	}
	var signer *sign.Signer
	if *key != "" {
		pem, err := os.ReadFile(*key)
		if err != nil {
			return err
		}
		if signer, err = sign.LoadPrivateKey(pem, sign.EnvPassword); err != nil {
			return fmt.Errorf("%s: %w", *key, err)
		}
	}
	opts, err := registryOptions(*caFile)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	pushed, err := publish.Publish(ctx, publish.Options{
		Release:  *release,
		Registry: *registry,
		Insecure: *insecure,
		Remote:   opts,
		Log:      os.Stdout,
		Signer:   signer,
		Unsigned: *unsigned,
	})
	if err != nil {
		return err
	}
	if *record != "" {
		return publish.WriteRecord(*record, pushed)
	}
	return nil
}

// registryOptions are the registry client's options: credentials as
// docker login and its helpers keep them (a public registry needs them to
// push, a test registry needs none), the CAs in caFile trusted besides the
// system's when given, and every answer bounded in size (package sign:
// the registry is not trusted).
func registryOptions(caFile string) ([]remote.Option, error) {
	base, ok := remote.DefaultTransport.(*http.Transport)
	if !ok {
		return nil, errors.New("the registry client's default transport is not an *http.Transport")
	}
	t := base.Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
		}
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithTransport(sign.LimitBodies(t))}, nil
}
