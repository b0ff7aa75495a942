package sign

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/dsse"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// Bounds on what is read from a registry, which is not trusted: the size
// of a manifest (the OCI distribution spec has registries take 4 MiB), of
// a signature's or attestation's layer, how many layers a .sig or .att
// manifest may have and their total size, and the size of any other answer
// (errors, tokens).
const (
	MaxManifestSize = 4 << 20
	MaxLayerSize    = 4 << 20
	MaxLayers       = 64
	MaxLayersSize   = 16 << 20
	maxOtherSize    = 1 << 20
	maxSignature    = 64 << 10 // base64, in an annotation
)

// Layer is one layer of a .sig or .att manifest, its blob read when it is
// a signature or an attestation.
type Layer struct {
	Digest      v1.Hash
	MediaType   types.MediaType
	Annotations map[string]string
	Payload     []byte
	err         error // why the blob was not read
}

// attached is a .sig or .att manifest as read.
type attached struct {
	desc   *remote.Descriptor
	digest v1.Hash
	layers []Layer
}

// readAttached reads the manifest tag names and its signature and
// attestation layers, within the bounds; nil when there is none.
func readAttached(tag name.Tag, opts []remote.Option) (*attached, error) {
	desc, err := remote.Get(tag, opts...)
	if IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(desc.Manifest) > MaxManifestSize {
		return nil, fmt.Errorf("%s: the manifest is larger than %d bytes", tag, MaxManifestSize)
	}
	if !desc.MediaType.IsImage() {
		return nil, fmt.Errorf("%s is a %s, not an image manifest", tag, desc.MediaType)
	}
	m, err := v1.ParseManifest(bytes.NewReader(desc.Manifest))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tag, err)
	}
	if len(m.Layers) > MaxLayers {
		return nil, fmt.Errorf("%s has %d layers, more than %d", tag, len(m.Layers), MaxLayers)
	}
	out := &attached{desc: desc, digest: desc.Digest}
	var total int64
	for _, d := range m.Layers {
		l := Layer{Digest: d.Digest, MediaType: d.MediaType, Annotations: d.Annotations}
		switch {
		case d.MediaType != SimpleSigningMediaType && d.MediaType != DSSEMediaType:
			l.err = fmt.Errorf("a %s, neither a signature nor an attestation", d.MediaType)
		case d.Size < 0 || d.Size > MaxLayerSize:
			l.err = fmt.Errorf("its size %d is beyond %d bytes", d.Size, MaxLayerSize)
		case total+d.Size > MaxLayersSize:
			l.err = fmt.Errorf("the layers before it and it are more than %d bytes", MaxLayersSize)
		default:
			total += d.Size
			l.Payload, l.err = readBlob(tag.Context(), d, opts)
		}
		out.layers = append(out.layers, l)
	}
	return out, nil
}

// readBlob reads the blob d describes and fails unless it has d's size
// and digest.
func readBlob(repo name.Repository, d v1.Descriptor, opts []remote.Option) ([]byte, error) {
	l, err := remote.Layer(repo.Digest(d.Digest.String()), opts...)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := readAll(rc, d.Size)
	if err != nil {
		return nil, fmt.Errorf("the blob: %w", err)
	}
	h, n, err := v1.SHA256(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	if n != d.Size || h != d.Digest {
		return nil, fmt.Errorf("the registry served %d bytes of digest %s for the blob %s of %d bytes", n, h, d.Digest, d.Size)
	}
	return b, nil
}

// VerifySignature checks that ref's sha256-<hex>.sig holds a signature by
// the key over a simple-signing payload that names ref's digest, as
// `cosign verify --key` does.
func VerifySignature(ref name.Digest, v signature.Verifier, opts ...remote.Option) error {
	digest, err := v1.NewHash(ref.DigestStr())
	if err != nil {
		return err
	}
	tag := SignatureTag(ref.Context(), digest)
	m, err := readAttached(tag, opts)
	if err != nil {
		return fmt.Errorf("the signatures: %w", err)
	}
	if m == nil {
		return fmt.Errorf("no signature: %s is not in the registry", tag.TagStr())
	}
	var why []string
	for i, l := range m.layers {
		err := verifySignatureLayer(l, v, digest)
		if err == nil {
			return nil
		}
		why = append(why, fmt.Sprintf("layer %d: %v", i+1, err))
	}
	return fmt.Errorf("no signature of %s by the key in %s (%s)", digest, tag.TagStr(), strings.Join(why, "; "))
}

// verifySignatureLayer checks the layer's signature with the key, then
// that its payload is cosign's and names digest.
func verifySignatureLayer(l Layer, v signature.Verifier, digest v1.Hash) error {
	if l.err != nil {
		return l.err
	}
	if l.MediaType != SimpleSigningMediaType {
		return fmt.Errorf("a %s, not a signature", l.MediaType)
	}
	b64 := l.Annotations[SignatureAnnotation]
	if b64 == "" || len(b64) > maxSignature {
		return fmt.Errorf("no signature in its %s annotation", SignatureAnnotation)
	}
	sig, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return fmt.Errorf("its signature: %w", err)
	}
	if err := v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(l.Payload)); err != nil {
		return fmt.Errorf("the signature does not verify with the key: %w", err)
	}
	var p payload.SimpleContainerImage
	if err := json.Unmarshal(l.Payload, &p); err != nil {
		return fmt.Errorf("its payload: %w", err)
	}
	if p.Critical.Type != payload.CosignSignatureType {
		return fmt.Errorf("its payload is a %q, not a %q", p.Critical.Type, payload.CosignSignatureType)
	}
	if got := p.Critical.Image.DockerManifestDigest; got != digest.String() {
		return fmt.Errorf("signed by the key for %s, not for %s: a signature of another manifest", got, digest)
	}
	return nil
}

// VerifyAttestation checks that ref's sha256-<hex>.att holds a DSSE
// envelope signed by the key of an in-toto statement whose subject is
// ref's digest and whose predicate type is predicateType, as `cosign
// verify-attestation --key --type` does, and returns the statement.
func VerifyAttestation(ref name.Digest, v signature.Verifier, predicateType string, opts ...remote.Option) ([]byte, error) {
	digest, err := v1.NewHash(ref.DigestStr())
	if err != nil {
		return nil, err
	}
	tag := AttestationTag(ref.Context(), digest)
	m, err := readAttached(tag, opts)
	if err != nil {
		return nil, fmt.Errorf("the attestations: %w", err)
	}
	if m == nil {
		return nil, fmt.Errorf("no attestation: %s is not in the registry", tag.TagStr())
	}
	var why []string
	for i, l := range m.layers {
		st, err := verifyAttestationLayer(l, v, digest)
		if err == nil && st.PredicateType != predicateType {
			err = fmt.Errorf("a %s, not a %s", st.PredicateType, predicateType)
		}
		if err == nil {
			return st.raw, nil
		}
		why = append(why, fmt.Sprintf("layer %d: %v", i+1, err))
	}
	return nil, fmt.Errorf("no attestation of %s by the key in %s (%s)", digest, tag.TagStr(), strings.Join(why, "; "))
}

// verifyAttestationLayer checks the layer's envelope with the key, then
// that it holds an in-toto statement whose subject is digest.
func verifyAttestationLayer(l Layer, v signature.Verifier, digest v1.Hash) (statement, error) {
	if l.err != nil {
		return statement{}, l.err
	}
	if l.MediaType != DSSEMediaType {
		return statement{}, fmt.Errorf("a %s, not an attestation", l.MediaType)
	}
	var decoded []byte
	dv := dsse.WrapVerifier(v, dsse.WithExpectedPayloadType(InTotoPayloadType), dsse.WithDecodedPayload(&decoded))
	if err := dv.VerifySignature(bytes.NewReader(l.Payload), nil); err != nil {
		return statement{}, fmt.Errorf("the envelope does not verify with the key: %w", err)
	}
	st, err := parseStatement(decoded, digest)
	if err != nil {
		return st, fmt.Errorf("signed by the key, but %w", err)
	}
	return st, nil
}

// LimitBodies wraps t so that no answer read through it is longer than
// the bounds: MaxManifestSize for a manifest, MaxLayerSize for a blob,
// less for anything else. A longer one fails the read.
func LimitBodies(t http.RoundTripper) http.RoundTripper { return limited{t} }

type limited struct{ next http.RoundTripper }

func (l limited) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.next.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	limit := int64(maxOtherSize)
	switch {
	case strings.Contains(req.URL.Path, "/manifests/"):
		limit = MaxManifestSize
	case strings.Contains(req.URL.Path, "/blobs/"):
		limit = MaxLayerSize
	}
	if resp.ContentLength > limit {
		_ = resp.Body.Close()
		return nil, fmt.Errorf("%s %s: the registry answers %d bytes, more than %d", req.Method, req.URL.Redacted(), resp.ContentLength, limit)
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, left: limit, limit: limit, url: req.URL.Redacted()}
	return resp, nil
}

// errTooLong is a body's error beyond its bound.
var errTooLong = errors.New("the registry answers more than the bound")

type limitedBody struct {
	io.ReadCloser
	left, limit int64
	url         string
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// At the bound: one more byte means too long.
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n > 0 {
			return 0, fmt.Errorf("%s: %w (%d bytes)", b.url, errTooLong, b.limit)
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}
