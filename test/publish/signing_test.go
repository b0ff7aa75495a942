package publish_test

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/hack/images"
	"github.com/gridsync/gridsync/hack/release/publish"
	"github.com/gridsync/gridsync/hack/release/sign"
)

// cosignCLI runs the pinned cosign offline: its home, Docker config and TUF
// cache in the test's folder (nothing of the machine's), TUF_MIRROR a
// mirror of which no root is cached, so that cosign does not fetch the
// Sigstore trusted root (it says so and goes on: a key needs none), and
// every proxy the egress trap, which counts what would have left the
// machine (the registry, on loopback, is reached without a proxy).
type cosignCLI struct {
	bin  string
	env  []string
	trap *egressTrap
}

func newCosign(t *testing.T, dir string) *cosignCLI {
	t.Helper()
	home := filepath.Join(dir, "cosign-home")
	tuf := filepath.Join(dir, "cosign-tuf")
	for _, d := range []string{home, tuf} {
		require.NoError(t, os.MkdirAll(d, 0o700))
	}
	trap := newEgressTrap(t)
	proxy := "http://" + trap.addr
	return &cosignCLI{bin: tool(t, "cosign"), trap: trap, env: []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"DOCKER_CONFIG=" + filepath.Join(home, ".docker"),
		"TUF_ROOT=" + tuf,
		"TUF_MIRROR=file://" + filepath.Join(tuf, "no-mirror"),
		"SIGSTORE_NO_CACHE=true",
		"HTTPS_PROXY=" + proxy, "HTTP_PROXY=" + proxy, "https_proxy=" + proxy, "http_proxy=" + proxy,
	}}
}

// run runs cosign in dir and returns its stdout, its stderr and whether
// it succeeded.
func (c *cosignCLI) run(t *testing.T, dir string, args ...string) (string, string, bool) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), c.bin, args...)
	cmd.Dir = dir
	cmd.Env = c.env
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err, "cosign %s", strings.Join(args, " "))
	}
	return stdout.String(), stderr.String(), err == nil
}

// generateKeyPair makes the releaser's key pair with cosign
// generate-key-pair (cosign.key encrypted with a random password, which
// it sets in COSIGN_PASSWORD for the rest of the test, cosign.pub) in dir.
func (c *cosignCLI) generateKeyPair(t *testing.T, dir string) (string, string) {
	t.Helper()
	pw := make([]byte, 16)
	_, err := rand.Read(pw)
	require.NoError(t, err)
	t.Setenv(sign.PasswordEnv, hex.EncodeToString(pw))
	c.env = append(c.env, sign.PasswordEnv+"="+hex.EncodeToString(pw))
	require.NoError(t, os.MkdirAll(dir, 0o700))
	_, stderr, ok := c.run(t, dir, "generate-key-pair")
	require.True(t, ok, "cosign generate-key-pair:\n%s", stderr)
	key, err := os.ReadFile(filepath.Join(dir, "cosign.key"))
	require.NoError(t, err)
	assert.Contains(t, string(key), "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----", "cosign's own format")
	return filepath.Join(dir, "cosign.key"), filepath.Join(dir, "cosign.pub")
}

// verify runs cosign verify --key on ref with the registry's CA and no
// transparency log: the payloads it printed, or its error.
func (c *cosignCLI) verify(t *testing.T, pub, ca, ref string) ([]string, error) {
	t.Helper()
	stdout, stderr, ok := c.run(t, filepath.Dir(pub), "verify", "--key", pub, "--insecure-ignore-tlog=true", "--registry-cacert", ca, ref)
	if !ok {
		return nil, errors.New(stderr)
	}
	var payloads []struct {
		Critical struct {
			Image struct {
				DockerManifestDigest string `json:"docker-manifest-digest"`
			} `json:"image"`
		} `json:"critical"`
	}
	require.NoError(t, json.Unmarshal([]byte(lastLine(stdout)), &payloads), stdout)
	var digests []string
	for _, p := range payloads {
		digests = append(digests, p.Critical.Image.DockerManifestDigest)
	}
	return digests, nil
}

// verifyAttestation runs cosign verify-attestation --key --type
// slsaprovenance1 on ref: the statements it printed (their subjects'
// digests and predicate types), or its error.
func (c *cosignCLI) verifyAttestation(t *testing.T, pub, ca, ref string) ([]string, error) {
	t.Helper()
	stdout, stderr, ok := c.run(t, filepath.Dir(pub), "verify-attestation", "--key", pub, "--type", "slsaprovenance1",
		"--insecure-ignore-tlog=true", "--registry-cacert", ca, ref)
	if !ok {
		return nil, errors.New(stderr)
	}
	var out []string
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var envelope struct {
			PayloadType string `json:"payloadType"`
			Payload     string `json:"payload"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &envelope), sc.Text())
		assert.Equal(t, sign.InTotoPayloadType, envelope.PayloadType)
		raw, err := base64.StdEncoding.DecodeString(envelope.Payload)
		require.NoError(t, err)
		var st struct {
			PredicateType string `json:"predicateType"`
			Subject       []struct {
				Digest map[string]string `json:"digest"`
			} `json:"subject"`
		}
		require.NoError(t, json.Unmarshal(raw, &st))
		for _, s := range st.Subject {
			out = append(out, st.PredicateType+" sha256:"+s.Digest["sha256"])
		}
	}
	require.NoError(t, sc.Err())
	return out, nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// egressTrap is a listener on loopback that the proxies point at: every
// connection to it is a request that would have left the machine.
type egressTrap struct {
	addr string
	mu   sync.Mutex
	seen []string // the first line of each request
}

func newEgressTrap(t *testing.T) *egressTrap {
	t.Helper()
	var lc net.ListenConfig
	l, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	e := &egressTrap{addr: l.Addr().String()}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			_ = c.Close()
			e.mu.Lock()
			e.seen = append(e.seen, strings.TrimSpace(line))
			e.mu.Unlock()
		}
	}()
	return e
}

func (e *egressTrap) requests() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.seen...)
}

// runMakeFails runs make target from the repository's root, expecting it
// to fail, and returns what it printed.
func runMakeFails(t *testing.T, target string, vars ...string) string {
	t.Helper()
	printed, err := makeCommand(t, target, vars...).CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "make %s was to fail:\n%s", target, printed)
	return string(printed)
}

// checkSigned checks every image and chart of the record with make verify
// and with the real cosign (verify and, for the images, verify-attestation,
// by digest), and that the record lists each one's signature and each
// image's attestation.
func checkSigned(t *testing.T, c *cosignCLI, record []publish.Pushed, verifyArgs []string, pub, ca string) {
	t.Helper()
	signatures, attestations := map[string]publish.Pushed{}, map[string]publish.Pushed{}
	for _, p := range record {
		switch p.Kind {
		case publish.Signature:
			signatures[p.Repository+"@"+p.Subject] = p
		case publish.Attestation:
			attestations[p.Repository+"@"+p.Subject] = p
		}
	}
	printed := runMake(t, "verify", verifyArgs...)
	t.Logf("make verify:\n%s", printed)
	artifacts := 0
	for _, p := range record {
		if p.Kind != publish.Image && p.Kind != publish.Chart {
			continue
		}
		artifacts++
		hex := strings.TrimPrefix(p.Digest, "sha256:")
		sig, ok := signatures[p.Reference()]
		if assert.True(t, ok, "%s: its signature is recorded", p) {
			assert.Equal(t, "sha256-"+hex+".sig", sig.Tag, "cosign's tag")
		}
		assert.Regexp(t, `verify: ok +`+string(p.Kind)+` +`+strings.ReplaceAll(p.Repository, ".", `\.`)+":"+p.Tag+"@"+p.Digest, printed)

		digests, err := c.verify(t, pub, ca, p.Reference())
		require.NoError(t, err, "cosign verify %s", p.Reference())
		assert.Contains(t, digests, p.Digest, "cosign verified the signature of %s", p.Reference())
		if p.Kind != publish.Image {
			continue
		}
		att, ok := attestations[p.Reference()]
		if assert.True(t, ok, "%s: its attestation is recorded", p) {
			assert.Equal(t, "sha256-"+hex+".att", att.Tag)
		}
		statements, err := c.verifyAttestation(t, pub, ca, p.Reference())
		require.NoError(t, err, "cosign verify-attestation %s", p.Reference())
		assert.Contains(t, statements, images.ProvenancePredicateType+" "+p.Digest, "cosign verified the provenance of %s", p.Reference())
	}
	assert.Equal(t, 4, artifacts, "two images and two charts")
	assert.Equal(t, artifacts, strings.Count(printed, "verify: ok"), printed)
}

// checkTamperingRefused replaces the agent's image under its tag by
// another (its index with one more annotation) and shows make verify and
// cosign refuse it; then copies the agent's signature and attestation
// onto the other's digest, which neither verifier takes either.
func checkTamperingRefused(t *testing.T, c *cosignCLI, agent publish.Pushed, verifyArgs []string, pub, ca string, opts []remote.Option) {
	t.Helper()
	repo, err := name.NewRepository(agent.Repository)
	require.NoError(t, err)
	original, err := remote.Index(repo.Digest(agent.Digest), opts...)
	require.NoError(t, err)
	changed, ok := mutate.Annotations(original, map[string]string{"org.opencontainers.image.description": "not what was released"}).(v1.ImageIndex)
	require.True(t, ok)
	changedDigest, err := changed.Digest()
	require.NoError(t, err)
	require.NoError(t, remote.WriteIndex(repo.Tag(agent.Tag), changed, opts...), "the changed image pushed under the agent's tag")
	tagged := repo.Tag(agent.Tag).String()

	printed := runMakeFails(t, "verify", verifyArgs...)
	t.Logf("make verify, the agent's tag replaced:\n%s", printed)
	assert.Contains(t, printed, "verify: FAIL "+tagged+": it names "+changedDigest.String()+", not "+agent.Digest)
	assert.Equal(t, 3, strings.Count(printed, "verify: ok"), "the other image and the charts still verify")
	printed = runMakeFails(t, "verify", "PUBLIC_KEY="+pub, "REGISTRY_CA="+ca, "REFS="+tagged)
	assert.Contains(t, printed, "no signature: sha256-"+changedDigest.Hex+".sig is not in the registry", printed)
	_, err = c.verify(t, pub, ca, tagged)
	require.Error(t, err, "cosign verify refuses the replaced image")
	assert.Contains(t, err.Error(), "no signatures found")

	// The agent's signature and attestation copied onto the changed
	// image's digest, as if they were its own.
	subject, err := v1.NewHash(agent.Digest)
	require.NoError(t, err)
	for from, to := range map[name.Tag]name.Tag{
		sign.SignatureTag(repo, subject):   sign.SignatureTag(repo, changedDigest),
		sign.AttestationTag(repo, subject): sign.AttestationTag(repo, changedDigest),
	} {
		d, err := remote.Get(from, opts...)
		require.NoError(t, err)
		require.NoError(t, remote.Tag(to, d, opts...))
	}
	byDigest := repo.Digest(changedDigest.String()).String()
	printed = runMakeFails(t, "verify", "PUBLIC_KEY="+pub, "REGISTRY_CA="+ca, "REFS="+byDigest+" "+tagged)
	t.Logf("make verify, the signatures copied:\n%s", printed)
	assert.Equal(t, 2, strings.Count(printed, "signed by the key for "+agent.Digest+", not for "+changedDigest.String()+": a signature of another manifest"), printed)
	assert.Equal(t, 2, strings.Count(printed, "signed by the key, but the in-toto statement's subject is not "+changedDigest.String()), printed)
	_, err = c.verify(t, pub, ca, byDigest)
	require.Error(t, err, "cosign verify refuses a signature copied from another digest")
	assert.Contains(t, err.Error(), "invalid or missing digest in claim")
	_, err = c.verifyAttestation(t, pub, ca, byDigest)
	require.Error(t, err, "cosign verify-attestation refuses an attestation copied from another digest")
	assert.Contains(t, err.Error(), "no matching subject digest found")

	// What was released still verifies by its digest.
	_, err = c.verify(t, pub, ca, agent.Reference())
	require.NoError(t, err)
	runMake(t, "verify", "PUBLIC_KEY="+pub, "REGISTRY_CA="+ca, "REFS="+agent.Reference())
}
