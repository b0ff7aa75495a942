// Command testreport reads `go test -json` on its standard input and
// prints what a plain `go test` prints (each package's ok or FAIL line, the
// whole output of a failed test, build errors), adding to each package's
// line its slowest test, and ending with the packages that took longest.
// `make test` pipes through it so that a test growing slow shows in every
// run's log, not only when someone looks.
//
// It exits non-zero when a test, a package or a build failed, or when the
// stream ended before a package did (the go command was killed).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type testKey struct{ pkg, test string }

type pkgResult struct {
	name    string
	elapsed float64
	status  string
	slowest string
	slowSec float64
}

type report struct {
	out      io.Writer
	output   map[testKey][]string // buffered until the test ends
	pkgs     map[string]*pkgResult
	order    []string
	started  []testKey // top-level tests, in the order they started
	failures int
}

func newReport(out io.Writer) *report {
	return &report{out: out, output: map[testKey][]string{}, pkgs: map[string]*pkgResult{}}
}

func (r *report) pkg(name string) *pkgResult {
	p, ok := r.pkgs[name]
	if !ok {
		p = &pkgResult{name: name}
		r.pkgs[name] = p
		r.order = append(r.order, name)
	}
	return p
}

func (r *report) handle(e event) {
	switch e.Action {
	case "build-output":
		fmt.Fprint(r.out, e.Output)
		return
	case "build-fail":
		r.failures++
		return
	}
	if e.Package == "" {
		return
	}
	p := r.pkg(e.Package)
	// A subtest's lines are kept with its top-level test's, in order.
	root, _, sub := strings.Cut(e.Test, "/")
	k := testKey{e.Package, root}
	switch e.Action {
	case "run":
		if e.Test != "" && !sub {
			r.started = append(r.started, k)
		}
	case "output":
		if !strings.HasPrefix(e.Output, "=== ") {
			r.output[k] = append(r.output[k], e.Output)
		}
	case "pass", "skip":
		if e.Test != "" && !sub && e.Elapsed > p.slowSec {
			p.slowest, p.slowSec = e.Test, e.Elapsed
		}
		if e.Test == "" {
			p.status, p.elapsed = e.Action, e.Elapsed
			r.flushPackage(p, false)
		}
		if !sub {
			delete(r.output, k)
		}
	case "fail":
		if e.Test != "" {
			// A failed test's whole output, its subtests' included, as
			// plain go test shows it.
			if !sub {
				r.print(r.output[k])
				delete(r.output, k)
			}
			return
		}
		p.status, p.elapsed = "fail", e.Elapsed
		r.failures++
		// Tests that never ended (the binary timed out or panicked
		// under them): their output, the panic's stack among it, is
		// what says why.
		r.flushUnfinished(p.name)
		r.flushPackage(p, true)
	}
}

func (r *report) print(lines []string) {
	for _, l := range lines {
		fmt.Fprint(r.out, l)
	}
}

// flushUnfinished prints the buffered output of the package's tests that
// never ended, in the order they started.
func (r *report) flushUnfinished(pkg string) {
	for _, k := range r.started {
		if k.pkg != pkg || k.test == "" {
			continue
		}
		if lines, ok := r.output[k]; ok {
			r.print(lines)
			delete(r.output, k)
		}
	}
}

// flushPackage prints the package's own output (its ok or FAIL line among
// it) with the slowest test added to the status line.
func (r *report) flushPackage(p *pkgResult, failed bool) {
	k := testKey{p.name, ""}
	for _, l := range r.output[k] {
		trimmed := strings.TrimRight(l, "\n")
		switch {
		case (strings.HasPrefix(trimmed, "ok  \t") || strings.HasPrefix(trimmed, "FAIL\t")) && p.slowSec >= 0.1:
			fmt.Fprintf(r.out, "%s  (slowest %s %.1fs)\n", trimmed, p.slowest, p.slowSec)
		case failed || strings.HasPrefix(trimmed, "ok  \t") || strings.HasPrefix(trimmed, "?   \t") || strings.HasPrefix(trimmed, "FAIL\t") || strings.HasPrefix(trimmed, "---") || strings.HasPrefix(trimmed, "panic"):
			fmt.Fprint(r.out, l)
		case !strings.HasPrefix(trimmed, "PASS") && !strings.HasPrefix(trimmed, "=== ") && strings.TrimSpace(trimmed) != "":
			// What TestMain or a benchmark printed outside a test.
			fmt.Fprint(r.out, l)
		}
	}
	delete(r.output, k)
}

// summary prints the slowest packages and says whether the run passed.
func (r *report) summary() bool {
	var ran []*pkgResult
	unfinished := 0
	for _, name := range r.order {
		p := r.pkgs[name]
		switch p.status {
		case "":
			unfinished++
			fmt.Fprintf(r.out, "testreport: %s never finished\n", name)
		case "pass", "fail":
			if p.elapsed > 0 {
				ran = append(ran, p)
			}
		}
	}
	slices.SortFunc(ran, func(a, b *pkgResult) int { return int((b.elapsed - a.elapsed) * 1000) })
	fmt.Fprintln(r.out, "slowest packages:")
	for _, p := range ran[:min(len(ran), 8)] {
		fmt.Fprintf(r.out, "  %-50s %7s  slowest test %s %s\n", p.name, seconds(p.elapsed), p.slowest, seconds(p.slowSec))
	}
	return r.failures == 0 && unfinished == 0
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(100 * time.Millisecond).String()
}

func main() {
	r := newReport(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// Not an event: the go command's own messages.
			fmt.Fprintln(r.out, string(line))
			continue
		}
		r.handle(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if !r.summary() {
		os.Exit(1)
	}
}
