package envelope

import (
	"fmt"
	"slices"
)

// MaxDepth is the deepest nesting of objects and arrays a document may
// have, the envelope itself being the first level. The gateway parses the
// file with serde_json, whose default recursion limit refuses a 128th
// level; an envelope it cannot read must not reach it. Refusing early also
// bounds what canonicalisation has to do with hostile input.
const MaxDepth = 127

// errTooDeep is what the candidate walk fails with beyond MaxDepth.
var errTooDeep = fmt.Errorf("nested deeper than %d levels", MaxDepth)

// Byte classes of the depth scan.
const (
	plainByte = iota
	quoteByte
	openByte
	closeByte
)

var depthClass = func() (t [256]uint8) {
	t['"'] = quoteByte
	t['{'], t['['] = openByte, openByte
	t['}'], t[']'] = closeByte, closeByte
	return t
}()

// scanDepth follows the nesting of v, valid JSON or a part of it cut
// between values, from depth, and returns the depth at its end and the
// deepest it went.
func scanDepth(v []byte, depth int) (end, deepest int) {
	deepest = depth
	for i := 0; i < len(v); i++ {
		switch depthClass[v[i]] {
		case quoteByte:
			i = endOfString(v, i)
		case openByte:
			depth++
			deepest = max(deepest, depth)
		case closeByte:
			depth--
		}
	}
	return depth, deepest
}

// nesting is how deep the valid JSON value v nests (a scalar 0, [] 1).
func nesting(v []byte) int {
	_, deepest := scanDepth(v, 0)
	return deepest
}

// checkDepth refuses a decoded document nested deeper than MaxDepth. The
// candidate arrays in skip (slices of data) were checked while they were
// walked, and are most of an overlay's bytes: only the rest is scanned.
func checkDepth(data []byte, skip ...[]byte) *Rejection {
	type span struct{ start, end int }
	var spans []span
	for _, s := range skip {
		if s != nil {
			start := cap(data) - cap(s) // s is a slice of data
			spans = append(spans, span{start, start + len(s)})
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	depth, deepest, at := 0, 0, 0
	for _, s := range spans {
		if s.start < at || s.end > len(data) {
			continue
		}
		var d int
		depth, d = scanDepth(data[at:s.start], depth)
		deepest = max(deepest, d)
		at = s.end
	}
	_, d := scanDepth(data[at:], depth)
	if deepest = max(deepest, d); deepest > MaxDepth {
		return reject(ReasonMalformedStructure, "%v", errTooDeep)
	}
	return nil
}
