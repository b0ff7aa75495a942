package praxisconfig

import (
	"bytes"
	"strconv"
)

// The config is written by a small emitter of its own rather than a YAML
// library: the document's shape is fixed, every string is written
// double-quoted (JSON string syntax is YAML, so a name can never turn
// into another type or open a key), and a gateway with forty providers
// renders in a fraction of a millisecond with little garbage, where a
// reflection-based encoder took over a millisecond and most of a megabyte
// (the agent renders every gateway on a busy two-core machine).

// writer writes block YAML: keys at an indent, scalars, lists.
type writer struct {
	buf bytes.Buffer
}

const spaces = "                                "

func (w *writer) pad(n int) {
	for n > len(spaces) {
		w.buf.WriteString(spaces)
		n -= len(spaces)
	}
	w.buf.WriteString(spaces[:n])
}

// key starts "key:" at indent; item starts "- key:" (a list item whose
// first key follows the dash) with the dash at indent.
func (w *writer) key(indent int, k string) {
	w.pad(indent)
	w.buf.WriteString(k)
	w.buf.WriteByte(':')
}

func (w *writer) item(indent int, k string) {
	w.pad(indent)
	w.buf.WriteString("- ")
	w.buf.WriteString(k)
	w.buf.WriteByte(':')
}

// open ends a key whose value is a nested block.
func (w *writer) open() { w.buf.WriteByte('\n') }

// str writes a string double-quoted: Go's escapes are a subset of YAML's
// double-quoted ones for the valid UTF-8 the API gives.
func (w *writer) str(s string) {
	w.buf.WriteByte(' ')
	w.buf.Write(strconv.AppendQuote(w.buf.AvailableBuffer(), s))
	w.buf.WriteByte('\n')
}

func (w *writer) boolean(b bool) {
	w.buf.WriteByte(' ')
	w.buf.Write(strconv.AppendBool(w.buf.AvailableBuffer(), b))
	w.buf.WriteByte('\n')
}

func (w *writer) integer(n int64) {
	w.buf.WriteByte(' ')
	w.buf.Write(strconv.AppendInt(w.buf.AvailableBuffer(), n, 10))
	w.buf.WriteByte('\n')
}

// float always reads back as a float: 1 is written 1.0.
func (w *writer) float(f float64) {
	w.buf.WriteByte(' ')
	b := strconv.AppendFloat(w.buf.AvailableBuffer(), f, 'f', -1, 64)
	if !bytes.ContainsAny(b, ".eE") {
		b = append(b, ".0"...)
	}
	w.buf.Write(b)
	w.buf.WriteByte('\n')
}

// strs writes a list of strings under the current key, "[]" when empty.
func (w *writer) strs(indent int, ss []string) {
	if len(ss) == 0 {
		w.buf.WriteString(" []\n")
		return
	}
	w.open()
	for _, s := range ss {
		w.pad(indent)
		w.buf.WriteString("- ")
		w.buf.Write(strconv.AppendQuote(w.buf.AvailableBuffer(), s))
		w.buf.WriteByte('\n')
	}
}

// emptyList ends a key whose list is empty.
func (w *writer) emptyList() { w.buf.WriteString(" []\n") }
