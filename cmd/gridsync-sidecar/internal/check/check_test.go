package check_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gridsync/gridsync/cmd/gridsync-sidecar/internal/check"
	"github.com/gridsync/gridsync/shared/envelope"
)

const fixtures = "../../../../shared/envelope/testdata/overlay-contract/v1"

func reports(t *testing.T, out []byte) []check.Report {
	t.Helper()
	var got []check.Report
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		var r check.Report
		require.NoError(t, json.Unmarshal([]byte(line), &r), line)
		got = append(got, r)
	}
	return got
}

func TestFilesReportsOneLinePerFileInOrder(t *testing.T) {
	files := []string{
		filepath.Join(fixtures, "valid-minimal.json"),
		filepath.Join(fixtures, "invalid-digest.json"),
		filepath.Join(fixtures, "valid-multi-candidate.json"),
	}
	var out bytes.Buffer
	allAccepted, err := check.Files(&out, nil, envelope.Options{}, files)
	require.NoError(t, err)
	assert.False(t, allAccepted)

	got := reports(t, out.Bytes())
	require.Len(t, got, 3)
	assert.Equal(t, check.Report{File: files[0], Decision: check.Accept, Revision: "abd5f4855454390febb53ad2085d182c465a78c5d14f0132317b4c9335aa8494"}, got[0])
	assert.Equal(t, check.Reject, got[1].Decision)
	assert.Equal(t, "digest_mismatch", got[1].Reason)
	assert.Empty(t, got[1].Revision)
	assert.NotEmpty(t, got[1].Detail)
	assert.Equal(t, check.Accept, got[2].Decision)
}

func TestEveryLineCarriesAllFourFields(t *testing.T) {
	var out bytes.Buffer
	_, err := check.Files(&out, nil, envelope.Options{}, []string{filepath.Join(fixtures, "valid-minimal.json")})
	require.NoError(t, err)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(bytes.TrimSpace(out.Bytes()), &fields))
	for _, key := range []string{"file", "decision", "reason", "revision"} {
		assert.Contains(t, fields, key)
	}
}

func TestUnreadableAndOversizedFilesAreRejected(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.json")
	require.NoError(t, os.WriteFile(big, bytes.Repeat([]byte(" "), 2000), 0o644))

	var out bytes.Buffer
	allAccepted, err := check.Files(&out, nil, envelope.Options{MaxBytes: 1000}, []string{filepath.Join(dir, "missing.json"), big})
	require.NoError(t, err)
	assert.False(t, allAccepted)
	got := reports(t, out.Bytes())
	assert.Equal(t, check.ReasonUnreadable, got[0].Reason)
	assert.Equal(t, "oversized", got[1].Reason)
}

func TestStandardInputIsReadForDash(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(fixtures, "valid-minimal.json"))
	require.NoError(t, err)
	var out bytes.Buffer
	allAccepted, err := check.Files(&out, bytes.NewReader(data), envelope.Options{}, []string{check.StdinName})
	require.NoError(t, err)
	assert.True(t, allAccepted)
	assert.Equal(t, "-", reports(t, out.Bytes())[0].File)
}

// The compressed form (a ConfigMap's binaryData value saved to a file) is
// checked as the sidecar checks it: decompressed within the size bound,
// then validated; a bomb is oversized.
func TestCompressedFilesAreCheckedWithinTheBound(t *testing.T) {
	plain, err := os.ReadFile(filepath.Join(fixtures, "valid-minimal.json"))
	require.NoError(t, err)
	dir := t.TempDir()
	good := filepath.Join(dir, "routing-overlay.json.zst")
	require.NoError(t, os.WriteFile(good, envelope.Compress(plain), 0o644))
	bomb := filepath.Join(dir, "bomb.zst")
	require.NoError(t, os.WriteFile(bomb, envelope.Compress(make([]byte, 8<<20)), 0o644))

	var out bytes.Buffer
	allAccepted, err := check.Files(&out, nil, envelope.Options{MaxBytes: 1 << 20}, []string{good, bomb})
	require.NoError(t, err)
	assert.False(t, allAccepted)
	got := reports(t, out.Bytes())
	assert.Equal(t, check.Report{File: good, Decision: check.Accept, Revision: "abd5f4855454390febb53ad2085d182c465a78c5d14f0132317b4c9335aa8494"}, got[0])
	assert.Equal(t, "oversized", got[1].Reason)
}
