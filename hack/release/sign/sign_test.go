package sign_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/secure-systems-lab/go-securesystemslib/encrypted"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/hack/images"
	"github.com/gridsync/gridsync/hack/release/sign"
)

// newRegistry is an in-memory registry on loopback, with handler in front
// of it when given (nil for none), and the client options for it.
func newRegistry(t *testing.T, handler func(http.ResponseWriter, *http.Request) bool) (name.Repository, []remote.Option) {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if handler != nil && handler(w, r) {
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	repo, err := name.NewRepository(strings.TrimPrefix(srv.URL, "http://")+"/gridsync/gridsync-agent", name.Insecure)
	require.NoError(t, err)
	tr, ok := http.DefaultTransport.(*http.Transport)
	require.True(t, ok)
	return repo, []remote.Option{remote.WithTransport(sign.LimitBodies(tr.Clone())), remote.WithContext(t.Context())}
}

// pushIndex pushes a random image index to repo and returns it by digest.
func pushIndex(t *testing.T, repo name.Repository, opts []remote.Option) name.Digest {
	t.Helper()
	idx, err := random.Index(64, 1, 2)
	require.NoError(t, err)
	d, err := idx.Digest()
	require.NoError(t, err)
	ref := repo.Digest(d.String())
	require.NoError(t, remote.WriteIndex(ref, idx, opts...))
	return ref
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return k
}

func newSigner(t *testing.T, k *ecdsa.PrivateKey) *sign.Signer {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(k)
	require.NoError(t, err)
	s, err := sign.LoadPrivateKey(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil)
	require.NoError(t, err)
	return s
}

func verifierOf(t *testing.T, k *ecdsa.PrivateKey) signature.Verifier {
	t.Helper()
	p, err := cryptoutils.MarshalPublicKeyToPEM(k.Public())
	require.NoError(t, err)
	v, err := sign.LoadPublicKey(p)
	require.NoError(t, err)
	return v
}

// provenance is an in-toto statement of SLSA v1 provenance of ref.
func provenance(ref name.Digest) []byte {
	hex := strings.TrimPrefix(ref.DigestStr(), "sha256:")
	return fmt.Appendf(nil, `{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"ghcr.io/gridsync/gridsync-agent","digest":{"sha256":%q}}],"predicateType":%q,"predicate":{"buildDefinition":{}}}`,
		hex, images.ProvenancePredicateType)
}

// A signature and an attestation as cosign makes them: the .sig and .att
// manifests' layers, media types and annotations; signing again writes
// nothing; the key's public half verifies both, another key neither.
func TestSignAndAttestAsCosign(t *testing.T) {
	repo, opts := newRegistry(t, nil)
	ref := pushIndex(t, repo, opts)
	key := newKey(t)
	s := newSigner(t, key)

	signed, err := s.Sign(ref, opts...)
	require.NoError(t, err)
	assert.False(t, signed.Existed)
	digest, err := v1.NewHash(ref.DigestStr())
	require.NoError(t, err)
	assert.Equal(t, "sha256-"+digest.Hex+".sig", signed.Tag.TagStr())
	sigImg, err := remote.Image(signed.Tag, opts...)
	require.NoError(t, err)
	m, err := sigImg.Manifest()
	require.NoError(t, err)
	assert.Equal(t, types.OCIManifestSchema1, m.MediaType)
	assert.Equal(t, types.OCIConfigJSON, m.Config.MediaType)
	require.Len(t, m.Layers, 1)
	assert.Equal(t, sign.SimpleSigningMediaType, m.Layers[0].MediaType)
	assert.NotEmpty(t, m.Layers[0].Annotations[sign.SignatureAnnotation])
	layers, err := sigImg.Layers()
	require.NoError(t, err)
	rc, err := layers[0].Compressed()
	require.NoError(t, err)
	var body struct {
		Critical struct {
			Identity struct {
				DockerReference string `json:"docker-reference"`
			} `json:"identity"`
			Image struct {
				DockerManifestDigest string `json:"docker-manifest-digest"`
			} `json:"image"`
			Type string `json:"type"`
		} `json:"critical"`
	}
	require.NoError(t, json.NewDecoder(rc).Decode(&body))
	require.NoError(t, rc.Close())
	assert.Equal(t, "cosign container image signature", body.Critical.Type)
	assert.Equal(t, ref.DigestStr(), body.Critical.Image.DockerManifestDigest)
	assert.Equal(t, repo.Name(), body.Critical.Identity.DockerReference)

	again, err := s.Sign(ref, opts...)
	require.NoError(t, err)
	assert.True(t, again.Existed, "signed already: nothing written")
	assert.Equal(t, signed.Digest, again.Digest)

	statement := provenance(ref)
	attested, err := s.Attest(ref, statement, opts...)
	require.NoError(t, err)
	assert.False(t, attested.Existed)
	assert.Equal(t, "sha256-"+digest.Hex+".att", attested.Tag.TagStr())
	attImg, err := remote.Image(attested.Tag, opts...)
	require.NoError(t, err)
	am, err := attImg.Manifest()
	require.NoError(t, err)
	require.Len(t, am.Layers, 1)
	assert.Equal(t, sign.DSSEMediaType, am.Layers[0].MediaType)
	assert.Equal(t, images.ProvenancePredicateType, am.Layers[0].Annotations["predicateType"])
	again, err = s.Attest(ref, statement, opts...)
	require.NoError(t, err)
	assert.True(t, again.Existed)
	assert.Equal(t, attested.Digest, again.Digest)

	v := verifierOf(t, key)
	require.NoError(t, sign.VerifySignature(ref, v, opts...))
	got, err := sign.VerifyAttestation(ref, v, images.ProvenancePredicateType, opts...)
	require.NoError(t, err)
	assert.JSONEq(t, string(statement), string(got))
	_, err = sign.VerifyAttestation(ref, v, "https://slsa.dev/provenance/v0.2", opts...)
	assert.ErrorContains(t, err, "not a https://slsa.dev/provenance/v0.2")

	other := verifierOf(t, newKey(t))
	assert.ErrorContains(t, sign.VerifySignature(ref, other, opts...), "does not verify with the key")
	_, err = sign.VerifyAttestation(ref, other, images.ProvenancePredicateType, opts...)
	assert.ErrorContains(t, err, "does not verify with the key")

	// Another key's signature is appended beside the first, as cosign
	// appends.
	second, err := newSigner(t, newKey(t)).Sign(ref, opts...)
	require.NoError(t, err)
	assert.False(t, second.Existed)
	sigImg, err = remote.Image(signed.Tag, opts...)
	require.NoError(t, err)
	m, err = sigImg.Manifest()
	require.NoError(t, err)
	assert.Len(t, m.Layers, 2)
	require.NoError(t, sign.VerifySignature(ref, v, opts...), "the first key's signature is kept")

	_, err = s.Attest(ref, provenance(pushIndex(t, repo, opts)), opts...)
	assert.ErrorContains(t, err, "subject is not", "a statement of another digest is not signed")
}

// A signature and an attestation copied onto another manifest (its tags
// pointed at them) do not verify it: their payloads name the digest they
// were made for. Nor does a manifest without any.
func TestVerifyRefusesWhatWasMadeForAnotherDigest(t *testing.T) {
	repo, opts := newRegistry(t, nil)
	ref := pushIndex(t, repo, opts)
	other := pushIndex(t, repo, opts)
	key := newKey(t)
	s := newSigner(t, key)
	signed, err := s.Sign(ref, opts...)
	require.NoError(t, err)
	attested, err := s.Attest(ref, provenance(ref), opts...)
	require.NoError(t, err)
	v := verifierOf(t, key)

	err = sign.VerifySignature(other, v, opts...)
	assert.ErrorContains(t, err, "no signature: sha256-")
	_, err = sign.VerifyAttestation(other, v, images.ProvenancePredicateType, opts...)
	assert.ErrorContains(t, err, "no attestation: sha256-")

	otherDigest, err := v1.NewHash(other.DigestStr())
	require.NoError(t, err)
	for from, to := range map[name.Tag]name.Tag{
		signed.Tag:   sign.SignatureTag(repo, otherDigest),
		attested.Tag: sign.AttestationTag(repo, otherDigest),
	} {
		desc, err := remote.Get(from, opts...)
		require.NoError(t, err)
		require.NoError(t, remote.Tag(to, desc, opts...))
	}
	err = sign.VerifySignature(other, v, opts...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "signed by the key for "+ref.DigestStr()+", not for "+other.DigestStr())
	_, err = sign.VerifyAttestation(other, v, images.ProvenancePredicateType, opts...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "subject is not "+other.DigestStr())
	require.NoError(t, sign.VerifySignature(ref, v, opts...), "the original still verifies")
}

// The registry is not trusted: a manifest beyond the bound fails the read
// before it is all read, a layer declared beyond the bound is not fetched,
// and a blob that is not what its descriptor says is refused.
func TestVerifyBoundsWhatItReads(t *testing.T) {
	huge := false
	repo, opts := newRegistry(t, func(w http.ResponseWriter, r *http.Request) bool {
		if !huge || r.Method != http.MethodGet || !strings.Contains(r.URL.Path, "/manifests/sha256-") {
			return false
		}
		// Chunked, no length said: the client must stop by itself.
		w.Header().Set("Content-Type", string(types.OCIManifestSchema1))
		chunk := []byte(strings.Repeat(" ", 64<<10))
		for range 2 * sign.MaxManifestSize / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				break
			}
		}
		return true
	})
	ref := pushIndex(t, repo, opts)
	key := newKey(t)
	s := newSigner(t, key)
	_, err := s.Sign(ref, opts...)
	require.NoError(t, err)
	v := verifierOf(t, key)

	huge = true
	err = sign.VerifySignature(ref, v, opts...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "more than the bound")
	huge = false

	// A .sig manifest whose layer says it is larger than the bound, and
	// one whose descriptor says another size than its blob holds.
	digest, err := v1.NewHash(ref.DigestStr())
	require.NoError(t, err)
	big := static.NewLayer([]byte("{}"), sign.SimpleSigningMediaType)
	lied := &sizedLayer{Layer: big, size: sign.MaxLayerSize + 1}
	forged, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer: lied, Annotations: map[string]string{sign.SignatureAnnotation: "AAAA"},
	})
	require.NoError(t, err)
	require.NoError(t, remote.WriteLayer(repo, big, opts...))
	require.NoError(t, remote.Put(sign.SignatureTag(repo, digest), forged, opts...))
	err = sign.VerifySignature(ref, v, opts...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("its size %d is beyond %d bytes", sign.MaxLayerSize+1, sign.MaxLayerSize))

	lied.size = 3
	forged, err = mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
		Layer: lied, Annotations: map[string]string{sign.SignatureAnnotation: "AAAA"},
	})
	require.NoError(t, err)
	require.NoError(t, remote.Put(sign.SignatureTag(repo, digest), forged, opts...))
	err = sign.VerifySignature(ref, v, opts...)
	require.Error(t, err)
	// Refused for the blob not being what its descriptor says, before its
	// signature (which is no signature) is looked at.
	assert.Contains(t, err.Error(), "layer 1: the registry served 2 bytes of digest")
}

// sizedLayer says another size than its content's.
type sizedLayer struct {
	v1.Layer
	size int64
}

func (l *sizedLayer) Size() (int64, error) { return l.size, nil }

// A key as cosign generate-key-pair writes it: PKCS #8, encrypted with
// go-securesystemslib's scrypt and secretbox, in a PEM block of cosign's
// type (or of cosign before v2's), the password in COSIGN_PASSWORD.
func TestLoadPrivateKeyReadsCosignKeys(t *testing.T) {
	key := newKey(t)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	sealed, err := encrypted.Encrypt(der, []byte("correct horse"))
	require.NoError(t, err)
	v := verifierOf(t, key)
	for _, pemType := range []string{"ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY"} {
		file := pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: sealed})

		t.Setenv(sign.PasswordEnv, "correct horse")
		s, err := sign.LoadPrivateKey(file, sign.EnvPassword)
		require.NoError(t, err, pemType)
		sig, err := s.Verifier().(signature.Signer).SignMessage(strings.NewReader("payload"))
		require.NoError(t, err)
		require.NoError(t, v.VerifySignature(strings.NewReader(string(sig)), strings.NewReader("payload")), "the key's own")

		t.Setenv(sign.PasswordEnv, "wrong")
		_, err = sign.LoadPrivateKey(file, sign.EnvPassword)
		assert.ErrorContains(t, err, "is COSIGN_PASSWORD its password?")
	}
	_, err = sign.LoadPrivateKey(pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED SIGSTORE PRIVATE KEY", Bytes: sealed}), func() ([]byte, error) {
		return nil, fmt.Errorf("no password")
	})
	assert.ErrorContains(t, err, "no password")
	ec, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	_, err = sign.LoadPrivateKey(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ec}), nil)
	assert.ErrorContains(t, err, `the key is a PEM "EC PRIVATE KEY"`)
}
