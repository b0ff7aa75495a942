package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/go-json-experiment/json"
)

var errNoRevision = errors.New("etcd answered without a revision")

// CompactEtcd compacts etcd's history up to its current revision, through
// etcd's JSON gateway, and returns that revision. A watch that resumes from
// an older resourceVersion then gets 410 Gone from storage.
func (cp *ControlPlane) CompactEtcd(ctx context.Context) (int64, error) {
	var status struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	// A range over the empty key returns the store's header revision.
	if err := cp.etcdCall(ctx, "/v3/kv/range", map[string]any{"key": "AA=="}, &status); err != nil {
		return 0, err
	}
	if status.Header.Revision == "" {
		return 0, errNoRevision
	}
	revision, err := strconv.ParseInt(status.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcd revision %q: %w", status.Header.Revision, err)
	}
	var ignored map[string]any
	if err := cp.etcdCall(ctx, "/v3/kv/compaction", map[string]any{"revision": status.Header.Revision, "physical": true}, &ignored); err != nil {
		return 0, err
	}
	return revision, nil
}

func (cp *ControlPlane) etcdCall(ctx context.Context, path string, body, out any) error {
	payload, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cp.etcdURL+path, bytes.NewReader(payload))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("etcd %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return fmt.Errorf("etcd %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s: %s: %s", path, resp.Status, buf.String())
	}
	if err := json.Unmarshal(buf.Bytes(), out); err != nil {
		return fmt.Errorf("etcd %s: decode %q: %w", path, buf.String(), err)
	}
	return nil
}
