package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

// runProbe GETs a URL and exits 0 on a 2xx answer: a probe for images
// without a shell or curl, such as a helm test asking a gateway's sidecar
// whether the overlay file is in place (/startupz).
//
//	gridsync-sidecar probe [--timeout D] URL
func runProbe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gridsync-sidecar probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "gridsync-sidecar probe: one URL expected")
		return exitUsage
	}
	url := fs.Arg(0)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		fmt.Fprintf(stderr, "gridsync-sidecar probe: %v\n", err)
		return exitUsage
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "gridsync-sidecar probe: %v\n", err)
		return exitFailure
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Fprintf(stdout, "%s %d %s\n", url, resp.StatusCode, body)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return exitFailure
	}
	return exitOK
}
