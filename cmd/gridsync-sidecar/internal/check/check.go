// Package check validates overlay envelope files offline, the way the
// sidecar validates them from the API, and reports one JSON line per file:
// the `gridsync-sidecar validate` command, in the spirit of
// `promtool check config`.
package check

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/go-json-experiment/json"

	"github.com/gridsync/gridsync/shared/envelope"
)

// Decisions.
const (
	Accept = "accept"
	Reject = "reject"
)

// ReasonUnreadable is reported for a file that could not be read; it is
// not an envelope reason because nothing was validated.
const ReasonUnreadable = "unreadable"

// Report is the line printed for one file. Reason and Revision are empty
// strings, not absent, when they do not apply, so that a script can read
// every field of every line.
type Report struct {
	File     string `json:"file"`
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Revision string `json:"revision"`
	// Detail explains a rejection to a person.
	Detail string `json:"detail,omitempty"`
}

// StdinName is the file name that reads standard input.
const StdinName = "-"

// Files validates each file with opts and writes one Report line per file
// to w, in order. It returns whether every file was accepted; err reports
// only a failure to write the report.
func Files(w io.Writer, stdin io.Reader, opts envelope.Options, files []string) (allAccepted bool, err error) {
	allAccepted = true
	for _, file := range files {
		report := File(stdin, opts, file)
		allAccepted = allAccepted && report.Decision == Accept
		line, err := json.Marshal(report)
		if err != nil {
			return false, fmt.Errorf("encode report for %s: %w", file, err)
		}
		if _, err := fmt.Fprintf(w, "%s\n", line); err != nil {
			return false, fmt.Errorf("write report: %w", err)
		}
	}
	return allAccepted, nil
}

// File validates one file.
func File(stdin io.Reader, opts envelope.Options, file string) Report {
	data, err := read(stdin, file, opts.MaxBytes)
	if err != nil {
		return Report{File: file, Decision: Reject, Reason: ReasonUnreadable, Detail: err.Error()}
	}
	if bytes.HasPrefix(data, zstdMagic) {
		// The overlay ConfigMap's compressed form (its binaryData value,
		// saved to a file): checked as the sidecar checks it, within the
		// same bound.
		data, err = envelope.Decompress(data, opts.MaxBytes)
	}
	var res envelope.Result
	if err == nil {
		res, err = envelope.Validate(data, opts)
	}
	var rej *envelope.Rejection
	if errors.As(err, &rej) {
		return Report{File: file, Decision: Reject, Reason: string(rej.Reason), Detail: rej.Detail}
	}
	return Report{File: file, Decision: Accept, Revision: res.Revision}
}

// zstdMagic opens every zstd frame; no JSON document starts with it.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// read reads at most one byte more than the size bound, so that a huge
// file is reported as oversized without being loaded whole.
func read(stdin io.Reader, file string, maxBytes int) ([]byte, error) {
	if maxBytes <= 0 {
		maxBytes = envelope.DefaultMaxBytes
	}
	r := stdin
	if file != StdinName {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer func() { _ = f.Close() }()
		r = f
	}
	return io.ReadAll(io.LimitReader(r, int64(maxBytes)+1))
}
