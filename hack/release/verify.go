package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/gridsync/gridsync/hack/images"
	"github.com/gridsync/gridsync/hack/release/publish"
	"github.com/gridsync/gridsync/hack/release/sign"
)

// target is an artifact to verify: what its reference names now in the
// registry, against the digest published when the record says it.
type target struct {
	ref  name.Reference // by tag or by digest
	want string         // the digest the record says the tag names, or ""
	kind publish.Kind   // publish.Image or publish.Chart; "" for what the manifest is
}

func verifyCommand(args []string) error {
	fs := flag.NewFlagSet("verify", flag.ExitOnError)
	key := fs.String("key", "", "the public key, PEM (cosign.pub)")
	record := fs.String("record", "", "what make publish recorded: verify every image and chart in it")
	registry := fs.String("registry", "", "host[:port] of the registry to verify at, instead of the references'")
	caFile := fs.String("ca", "", "a PEM file of CAs the registry's certificate is checked against, beside the system's")
	insecure := fs.Bool("insecure", false, "speak plain HTTP to the registry")
	_ = fs.Parse(args)
	if (*record == "") == (fs.NArg() == 0) {
		usage()
	}
	if *key == "" {
		return errors.New("no public key to verify with: make verify PUBLIC_KEY=cosign.pub (release verify -key)")
	}
	pem, err := os.ReadFile(*key)
	if err != nil {
		return err
	}
	verifier, err := sign.LoadPublicKey(pem)
	if err != nil {
		return fmt.Errorf("%s: %w", *key, err)
	}
	var nameOpts []name.Option
	if *insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	targets, err := verifyTargets(*record, fs.Args(), *registry, nameOpts)
	if err != nil {
		return err
	}
	opts, err := registryOptions(*caFile)
	if err != nil {
		return err
	}
	failed := 0
	for _, t := range targets {
		what, err := verifyTarget(t, verifier, opts)
		if err != nil {
			failed++
			fmt.Printf("verify: FAIL %s: %v\n", t.ref, err)
			continue
		}
		fmt.Printf("verify: ok   %s\n", what)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d artifacts did not verify", failed, len(targets))
	}
	return nil
}

// verifyTargets are the images and charts of the record, or the
// references, at registry when it is given.
func verifyTargets(record string, refs []string, registry string, nameOpts []name.Option) ([]target, error) {
	at := func(repo name.Repository) (name.Repository, error) {
		if registry == "" {
			return repo, nil
		}
		return name.NewRepository(registry+"/"+repo.RepositoryStr(), nameOpts...)
	}
	var out []target
	for _, r := range refs {
		ref, err := name.ParseReference(r, nameOpts...)
		if err != nil {
			return nil, err
		}
		repo, err := at(ref.Context())
		if err != nil {
			return nil, err
		}
		if d, ok := ref.(name.Digest); ok {
			out = append(out, target{ref: repo.Digest(d.DigestStr())})
		} else {
			out = append(out, target{ref: repo.Tag(ref.Identifier())})
		}
	}
	if record == "" {
		return out, nil
	}
	pushed, err := publish.ReadRecord(record)
	if err != nil {
		return nil, err
	}
	for _, p := range pushed {
		if p.Kind != publish.Image && p.Kind != publish.Chart {
			continue // what is attached to them is verified with them
		}
		repo, err := name.NewRepository(p.Repository, nameOpts...)
		if err == nil {
			repo, err = at(repo)
		}
		if err != nil {
			return nil, err
		}
		t := target{ref: repo.Digest(p.Digest), want: p.Digest, kind: p.Kind}
		if p.Tag != "" {
			t.ref = repo.Tag(p.Tag)
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s records no image and no chart", record)
	}
	return out, nil
}

// verifyTarget fetches the manifest the reference names (its digest
// computed from its bytes, not taken from the registry's word), checks it
// is the one published, and verifies its signature and, for an image, its
// provenance's attestation.
func verifyTarget(t target, v signature.Verifier, opts []remote.Option) (string, error) {
	desc, err := remote.Get(t.ref, opts...)
	if err != nil {
		return "", err
	}
	if t.want != "" && desc.Digest.String() != t.want {
		return "", fmt.Errorf("it names %s, not %s, the manifest published: it was replaced", desc.Digest, t.want)
	}
	kind := t.kind
	if kind == "" {
		if kind, err = kindOf(desc); err != nil {
			return "", err
		}
	}
	subject := t.ref.Context().Digest(desc.Digest.String())
	what := fmt.Sprintf("%-5s %s@%s: signed", kind, t.ref, desc.Digest)
	var errs []error
	if err := sign.VerifySignature(subject, v, opts...); err != nil {
		errs = append(errs, err)
	}
	if kind == publish.Image {
		if _, err := sign.VerifyAttestation(subject, v, images.ProvenancePredicateType, opts...); err != nil {
			errs = append(errs, err)
		}
		what += ", its provenance (" + images.ProvenancePredicateType + ") attested"
	}
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	return what + " by the key", nil
}

// kindOf says whether the manifest is an image (an index or an image's
// manifest) or a Helm chart.
func kindOf(desc *remote.Descriptor) (publish.Kind, error) {
	switch {
	case desc.MediaType.IsIndex():
		return publish.Image, nil
	case desc.MediaType.IsImage():
		m, err := v1.ParseManifest(bytes.NewReader(desc.Manifest))
		if err != nil {
			return "", err
		}
		if m.Config.MediaType == publish.HelmConfigMediaType {
			return publish.Chart, nil
		}
		return publish.Image, nil
	}
	return "", fmt.Errorf("a %s, neither an image nor a chart", strings.TrimSpace(string(desc.MediaType)))
}
