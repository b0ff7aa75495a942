package health

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Probe's exit codes.
const (
	ProbeOK      = 0
	ProbeFailed  = 1
	ProbeMisused = 2
)

// Probe GETs a URL and returns ProbeOK on a 2xx answer: a probe for images
// without a shell or curl, such as a helm test asking a gateway's sidecar
// whether the overlay file is in place (/startupz) or the agent whether it
// is ready (/readyz).
//
//	<binary> probe [--timeout D] URL
func Probe(binary string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(binary+" probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return ProbeMisused
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, binary+" probe: one URL expected")
		return ProbeMisused
	}
	url := fs.Arg(0)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		fmt.Fprintf(stderr, "%s probe: %v\n", binary, err)
		return ProbeMisused
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "%s probe: %v\n", binary, err)
		return ProbeFailed
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Fprintf(stdout, "%s %d %s\n", url, resp.StatusCode, body)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return ProbeFailed
	}
	return ProbeOK
}
