package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// helmPackage writes files into a package as helm package does: in the
// order given, each stamped with now, helm's gzip header.
func helmPackage(t *testing.T, now time.Time, files ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Comment, zw.Extra, zw.ModTime = "Helm", []byte("+aHR0cHM6Ly95b3V0dS5iZS96OXV6MWljandyTQo="), now
	tw := tar.NewWriter(zw)
	for _, f := range files {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: f, Mode: 0o644, Size: int64(len(f)), ModTime: now, Uid: 1000, Uname: "someone"}))
		_, err := tw.Write([]byte(f))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	return b.Bytes()
}

// The same files packaged at two times, in two orders, give the same
// bytes: every file stamped with the epoch, root's, 0644, sorted; the
// gzip header without a time, helm's comment and extra field kept.
func TestNormalizeChartIsReproducible(t *testing.T) {
	epoch := time.Unix(1767225600, 0).UTC()
	first, err := normalizeChart(helmPackage(t, time.Now(), "c/Chart.yaml", "c/values.yaml", "c/templates/a.yaml"), epoch)
	require.NoError(t, err)
	second, err := normalizeChart(helmPackage(t, time.Now().Add(time.Hour), "c/templates/a.yaml", "c/Chart.yaml", "c/values.yaml"), epoch)
	require.NoError(t, err)
	assert.Equal(t, first, second)
	again, err := normalizeChart(first, epoch)
	require.NoError(t, err)
	assert.Equal(t, first, again, "normalizing is idempotent")

	zr, err := gzip.NewReader(bytes.NewReader(first))
	require.NoError(t, err)
	assert.True(t, zr.ModTime.IsZero())
	assert.Empty(t, zr.Name)
	assert.Equal(t, "Helm", zr.Comment)
	tr := tar.NewReader(zr)
	var names []string
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		names = append(names, hdr.Name)
		assert.True(t, hdr.ModTime.Equal(epoch), hdr.Name)
		assert.Equal(t, int64(0o644), hdr.Mode)
		assert.Zero(t, hdr.Uid)
		assert.Empty(t, hdr.Uname)
		data, err := io.ReadAll(tr)
		require.NoError(t, err)
		assert.Equal(t, hdr.Name, string(data), "the content kept")
	}
	assert.Equal(t, []string{"c/Chart.yaml", "c/templates/a.yaml", "c/values.yaml"}, names)

	other, err := normalizeChart(first, epoch.Add(time.Second))
	require.NoError(t, err)
	assert.NotEqual(t, first, other, "another commit's time, other bytes")
}

func TestSourceDateEpoch(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1767225600")
	e, err := sourceDateEpoch()
	require.NoError(t, err)
	assert.Equal(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), e)
	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	_, err = sourceDateEpoch()
	assert.ErrorContains(t, err, "not a count of seconds")
}
