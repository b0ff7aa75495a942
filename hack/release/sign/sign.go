// Package sign signs what make publish pushes as cosign signs it with a
// key, and verifies it as `cosign verify --key` and `cosign
// verify-attestation --key` do, with nothing but the registry and the
// public key (no transparency log).
//
// Cosign's scheme: the signatures of the manifest with digest
// sha256:<hex> are the layers of an image manifest tagged
// sha256-<hex>.sig in the same repository, each layer a simple-signing
// payload (a JSON document naming the repository and that digest) whose
// signature, base64, is the layer's annotation
// dev.cosignproject.cosign/signature. Its attestations are the layers of
// sha256-<hex>.att, each a DSSE envelope of an in-toto statement whose
// subject is that digest, annotated with the statement's predicate type.
// A new signature is appended to the layers already there, as cosign
// appends; when one by the same key for the same digest (of the same
// statement) is there already, signing writes nothing.
package sign

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/dsse"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// Cosign's media types and annotations.
const (
	// SimpleSigningMediaType is a signature layer's: the payload.
	SimpleSigningMediaType types.MediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	// DSSEMediaType is an attestation layer's: a DSSE envelope.
	DSSEMediaType types.MediaType = "application/vnd.dsse.envelope.v1+json"
	// InTotoPayloadType is the payload type of the envelope: an in-toto
	// statement.
	InTotoPayloadType = "application/vnd.in-toto+json"
	// SignatureAnnotation holds a layer's signature, base64 (empty on an
	// attestation, whose signature is in its envelope).
	SignatureAnnotation = "dev.cosignproject.cosign/signature"
	// PredicateTypeAnnotation says an attestation's predicate type.
	PredicateTypeAnnotation = "predicateType"
)

// SignatureTag is the tag cosign keeps the signatures of digest under.
func SignatureTag(repo name.Repository, digest v1.Hash) name.Tag {
	return repo.Tag(digest.Algorithm + "-" + digest.Hex + ".sig")
}

// AttestationTag is the tag cosign keeps the attestations of digest under.
func AttestationTag(repo name.Repository, digest v1.Hash) name.Tag {
	return repo.Tag(digest.Algorithm + "-" + digest.Hex + ".att")
}

// Signer signs with a private key.
type Signer struct {
	sv signature.SignerVerifier
}

// Verifier is the verifier of the signer's own signatures.
func (s *Signer) Verifier() signature.Verifier { return s.sv }

// Attached is the manifest a signature or attestation is a layer of,
// after signing.
type Attached struct {
	Tag    name.Tag
	Digest v1.Hash
	// Existed is true when the manifest held a signature by the key over
	// the same payload already: nothing was written.
	Existed bool
}

// Sign signs the manifest ref names with cosign's simple-signing payload
// and adds the signature to ref's sha256-<hex>.sig, unless one by the key
// is there already.
func (s *Signer) Sign(ref name.Digest, opts ...remote.Option) (Attached, error) {
	digest, err := v1.NewHash(ref.DigestStr())
	if err != nil {
		return Attached{}, err
	}
	body, err := payload.Cosign{Image: ref}.MarshalJSON()
	if err != nil {
		return Attached{}, err
	}
	tag := SignatureTag(ref.Context(), digest)
	signed := func(l Layer) bool { return verifySignatureLayer(l, s.sv, digest) == nil }
	return attach(tag, signed, func() (v1.Layer, map[string]string, error) {
		sig, err := s.sv.SignMessage(bytes.NewReader(body))
		if err != nil {
			return nil, nil, err
		}
		return static.NewLayer(body, SimpleSigningMediaType),
			map[string]string{SignatureAnnotation: base64.StdEncoding.EncodeToString(sig)}, nil
	}, opts)
}

// Attest signs the in-toto statement (the bytes as they are: its subject
// must be ref's digest) into a DSSE envelope and adds it to ref's
// sha256-<hex>.att, unless an envelope by the key of the same statement is
// there already: what `cosign attest --key` does with the statement's
// predicate.
func (s *Signer) Attest(ref name.Digest, statement []byte, opts ...remote.Option) (Attached, error) {
	digest, err := v1.NewHash(ref.DigestStr())
	if err != nil {
		return Attached{}, err
	}
	st, err := parseStatement(statement, digest)
	if err != nil {
		return Attached{}, err
	}
	tag := AttestationTag(ref.Context(), digest)
	attested := func(l Layer) bool {
		got, err := verifyAttestationLayer(l, s.sv, digest)
		return err == nil && bytes.Equal(got.raw, statement)
	}
	return attach(tag, attested, func() (v1.Layer, map[string]string, error) {
		envelope, err := dsse.WrapSigner(s.sv, InTotoPayloadType).SignMessage(bytes.NewReader(statement))
		if err != nil {
			return nil, nil, err
		}
		return static.NewLayer(envelope, DSSEMediaType),
			map[string]string{PredicateTypeAnnotation: st.PredicateType, SignatureAnnotation: ""}, nil
	}, opts)
}

// attach appends the layer newLayer makes to the manifest tag names (an
// empty one, as cosign starts from, when there is none), unless one of its
// layers is done already.
func attach(tag name.Tag, done func(Layer) bool, newLayer func() (v1.Layer, map[string]string, error), opts []remote.Option) (Attached, error) {
	out := Attached{Tag: tag}
	m, err := readAttached(tag, opts)
	if err != nil {
		return out, err
	}
	base := emptySignatures()
	if m != nil {
		for _, l := range m.layers {
			if done(l) {
				out.Digest, out.Existed = m.digest, true
				return out, nil
			}
		}
		if base, err = m.desc.Image(); err != nil {
			return out, err
		}
	}
	layer, annotations, err := newLayer()
	if err != nil {
		return out, err
	}
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, Annotations: annotations})
	if err != nil {
		return out, err
	}
	if out.Digest, err = img.Digest(); err != nil {
		return out, err
	}
	if err := remote.Write(tag, img, opts...); err != nil {
		return out, err
	}
	d, err := remote.Head(tag, opts...)
	if err != nil {
		return out, fmt.Errorf("after the push: %w", err)
	}
	if d.Digest != out.Digest {
		return out, fmt.Errorf("pushed %s, the registry serves %s for %s", out.Digest, d.Digest, tag)
	}
	return out, nil
}

// emptySignatures is the image cosign starts a .sig or .att from: no
// layers, OCI media types.
func emptySignatures() v1.Image {
	return mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
}

// statement is what is read of an in-toto statement.
type statement struct {
	Type          string `json:"_type"`
	PredicateType string `json:"predicateType"`
	Subject       []struct {
		Name   string            `json:"name"`
		Digest map[string]string `json:"digest"`
	} `json:"subject"`
	raw []byte
}

// parseStatement reads an in-toto statement and fails unless digest is
// among its subjects.
func parseStatement(raw []byte, digest v1.Hash) (statement, error) {
	var st statement
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, fmt.Errorf("the in-toto statement: %w", err)
	}
	st.raw = raw
	if st.PredicateType == "" {
		return st, errors.New("the in-toto statement has no predicateType")
	}
	for _, s := range st.Subject {
		if s.Digest[digest.Algorithm] == digest.Hex {
			return st, nil
		}
	}
	return st, fmt.Errorf("the in-toto statement's subject is not %s", digest)
}

// IsNotFound says whether err is a registry's 404: nothing under that tag
// or digest.
func IsNotFound(err error) bool {
	var terr *transport.Error
	return errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound
}

// readAll reads r to its end, failing beyond limit bytes.
func readAll(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("more than %d bytes", limit)
	}
	return b, nil
}
