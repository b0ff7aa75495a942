// Command testreport reads `go test -json` on its standard input (or from
// the files named as arguments, read at the same time: `make test` runs
// several go commands at once, each into a pipe of its own) and prints what a plain `go test` prints (each package's ok or FAIL line, the
// whole output of a failed test, build errors), adding to each package's
// line its slowest test, and ending with the packages that took longest.
// `make test` pipes through it so that a test growing slow shows in every
// run's log, not only when someone looks.
//
// An argument label=path names its stream: its packages show as
// "package [label]", so the benchmarks' run of a package is told apart
// from its tests' run.
//
// It exits non-zero when a test, a package or a build failed, or when the
// stream ended before a package did (the go command was killed).
package main

import (
	"bufio"
	"bytes"
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
	name    string // the package, and its stream's label in brackets
	label   string
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

func (r *report) pkg(name, label string) *pkgResult {
	p, ok := r.pkgs[name]
	if !ok {
		p = &pkgResult{name: name, label: label}
		r.pkgs[name] = p
		r.order = append(r.order, name)
	}
	return p
}

// handle takes one event of the stream labelled label ("" for one that
// is not).
func (r *report) handle(e event, label string) {
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
	if label != "" {
		e.Package += " [" + label + "]"
	}
	p := r.pkg(e.Package, label)
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
		if p.label != "" && isStatusLine(trimmed) {
			trimmed += " [" + p.label + "]"
			l = trimmed + "\n"
		}
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

// isStatusLine says whether line is a package's ok, FAIL or no-test line.
func isStatusLine(line string) bool {
	return strings.HasPrefix(line, "ok  \t") || strings.HasPrefix(line, "FAIL\t") || strings.HasPrefix(line, "?   \t")
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
		fmt.Fprintf(r.out, "  %-58s %7s  slowest test %s %s\n", p.name, seconds(p.elapsed), p.slowest, seconds(p.slowSec))
	}
	return r.failures == 0 && unfinished == 0
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(100 * time.Millisecond).String()
}

// line is one line of one input stream.
type line struct {
	label string
	text  []byte
	err   error // the stream failed: the last line of that stream
	done  bool  // the stream ended: the last line of that stream
}

// read sends each line of in to lines, then one line saying it ended.
func read(in io.Reader, label string, lines chan<- line) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		lines <- line{label: label, text: bytes.Clone(sc.Bytes())}
	}
	lines <- line{label: label, err: sc.Err(), done: true}
}

func main() {
	r := newReport(os.Stdout)
	lines := make(chan line)
	streams := 0
	for _, arg := range os.Args[1:] {
		label, path, ok := strings.Cut(arg, "=")
		if !ok {
			label, path = "", arg
		}
		// A named pipe opens when its writer does: opened here, in its
		// reader, one pipe waiting does not hold up the others.
		streams++
		go func() {
			f, err := os.Open(path)
			if err != nil {
				lines <- line{label: label, err: err, done: true}
				return
			}
			defer f.Close()
			read(f, label, lines)
		}()
	}
	if streams == 0 {
		streams++
		go read(os.Stdin, "", lines)
	}
	failed := false
	for streams > 0 {
		l := <-lines
		if l.done {
			streams--
			if l.err != nil {
				fmt.Fprintln(os.Stderr, "testreport:", l.err)
				failed = true
			}
			continue
		}
		var e event
		if len(l.text) == 0 || l.text[0] != '{' || json.Unmarshal(l.text, &e) != nil {
			// Not an event: the go command's own messages.
			fmt.Fprintln(r.out, string(l.text))
			continue
		}
		r.handle(e, l.label)
	}
	passed := r.summary()
	switch {
	case failed:
		os.Exit(2)
	case !passed:
		os.Exit(1)
	}
}
