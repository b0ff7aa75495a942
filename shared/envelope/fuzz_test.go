package envelope_test

import (
	"path/filepath"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/gridsync/gridsync/shared/envelope"
)

// FuzzValidate: the validator never panics, every rejection carries a
// reason from the closed set, and an accepted input re-validates to the
// same revision, which is also the digest of its overlay.
//
//	go test ./shared/envelope -run '^$' -fuzz FuzzValidate -fuzztime 1m
func FuzzValidate(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		f.Add(readFixture(f, filepath.Base(file)), false)
		f.Add(readFixture(f, filepath.Base(file)), true)
	}
	f.Add([]byte(`{"schema_version":"1"}`), false)
	// The deepest the gateway reads, and one level more.
	f.Add(envelopeWithMember(f, nestedArrays(envelope.MaxDepth-4)), false)
	f.Add(envelopeWithMember(f, nestedObjects(envelope.MaxDepth-3)), false)
	f.Add([]byte(`{"network":"n","local_site":"s","candidates":[]}`), true)

	known := map[envelope.Reason]bool{}
	for _, r := range envelope.Reasons() {
		known[r] = true
	}
	f.Fuzz(func(t *testing.T, data []byte, legacy bool) {
		opts := envelope.Options{AcceptLegacy: legacy, MaxBytes: 64 << 10}
		res, err := envelope.Validate(data, opts)
		if err != nil {
			if reason := envelope.RejectionReason(err); !known[reason] {
				t.Fatalf("rejection without a known reason: %v", err)
			}
			return
		}
		again, err := envelope.Validate(data, opts)
		if err != nil || again.Revision != res.Revision {
			t.Fatalf("accepted input did not re-validate to %s: %v", res.Revision, err)
		}
		overlay := data
		if !res.Legacy {
			var doc struct {
				Overlay jsontext.Value `json:"overlay"`
			}
			if err := json.Unmarshal(data, &doc); err != nil {
				t.Fatalf("accepted input does not decode: %v", err)
			}
			overlay = doc.Overlay
		}
		digest, err := envelope.Digest(overlay)
		if err != nil || digest != res.Revision {
			t.Fatalf("revision %s is not the overlay digest %s: %v", res.Revision, digest, err)
		}
	})
}
