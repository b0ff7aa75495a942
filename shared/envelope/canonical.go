package envelope

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// canonicalizeOptions skip what the decoding pass has already refused:
// every value canonicalised here comes from decodeWithCandidates, whose
// decoder rejects duplicate member names and invalid UTF-8 anywhere in the
// overlay. Checking again costs a tenth of the validator's time.
var canonicalizeOptions = []jsontext.Options{
	jsontext.AllowDuplicateNames(true),
	jsontext.AllowInvalidUTF8(true),
}

// canonicalWriter appends the RFC 8785 form of JSON values that the
// decoder has already checked (syntax, UTF-8, duplicate names, number
// range), so it can scan them without checking anything again.
//
// Most of an overlay is already canonical once whitespace is dropped and
// members are sorted: ASCII member names, strings without escapes,
// literals, small integers and short decimals are written as they are.
// Anything else (escapes, exponents, long digit strings, non-ASCII member
// names, which sort by UTF-16 code units) is handed to the library's
// canonicaliser, which stays the reference: a fuzz target holds the two
// byte for byte equal. RFC 8785 is compositional, so the parts can be
// mixed freely.
type canonicalWriter struct {
	// members is a stack: each object appends its members above those of
	// the objects it is nested in, and truncates them when done.
	members []rawMember
	scratch jsontext.Value

	// root is the value being canonicalised, depth how many containers
	// deep the writer is in it. Near the top, finding where a member ends
	// is a scan of the member; deeper down, scanning at every level would
	// make nested input quadratic, so the ends of all containers in root
	// are found once, in one pass, and looked up.
	root  []byte
	depth int
	ends  containerEnds
	// limited says maxDepth applies: how many containers deep below the
	// root a value may nest (deeper is errTooDeep).
	limited  bool
	maxDepth int
}

// shallowDepth is how deep a container's end is still found by scanning it.
// Overlays nest three or four levels; beyond this the one-pass table pays.
const shallowDepth = 6

// beyondLimit reports whether nesting depth containers below the root
// breaks the depth limit, when there is one.
func (w *canonicalWriter) beyondLimit(depth int) bool {
	return w.limited && depth > w.maxDepth
}

// start makes root the value that the next calls canonicalise.
func (w *canonicalWriter) start(root []byte) {
	w.root, w.depth = root, 0
	w.ends.reset()
}

type rawMember struct {
	name  []byte // the raw JSON string, quotes included
	value []byte // the raw JSON value, without surrounding whitespace
}

// appendValue appends the canonical form of the checked JSON value v.
func (w *canonicalWriter) appendValue(dst, v []byte) ([]byte, error) {
	w.start(v)
	i := skipSpace(v, 0)
	end := endOfValue(v, i)
	return w.appendAt(dst, v[i:end])
}

// collectRoot makes the object v the root and pushes its members.
func (w *canonicalWriter) collectRoot(v []byte) (base int, plain bool) {
	w.start(v)
	return w.collect(v)
}

// endOf returns the index just past the value that starts at v[i], v
// being a part of root.
func (w *canonicalWriter) endOf(v []byte, i int) int {
	if w.depth < shallowDepth || (v[i] != '{' && v[i] != '[') {
		return endOfValue(v, i)
	}
	// v is a slice of root, so their capacities tell where v starts.
	offset := cap(w.root) - cap(v)
	return w.ends.of(w.root, offset+i) - offset
}

// appendAt appends the canonical form of v, a value without surrounding
// whitespace.
func (w *canonicalWriter) appendAt(dst, v []byte) ([]byte, error) {
	if len(v) == 0 {
		return w.appendByLibrary(dst, v)
	}
	switch v[0] {
	case '{':
		return w.appendObject(dst, v)
	case '[':
		return w.appendArray(dst, v)
	case '"':
		// Without escapes a valid JSON string holds no control
		// characters, and RFC 8785 escapes nothing else.
		if bytes.IndexByte(v, '\\') < 0 {
			return append(dst, v...), nil
		}
	case 't', 'f', 'n':
		return append(dst, v...), nil
	default:
		return appendNumber(dst, v)
	}
	return w.appendByLibrary(dst, v)
}

// appendNumber appends the canonical form of the valid JSON number v: the
// shortest ECMAScript form of its double, as the library writes it (-0 as
// 0), refusing a number beyond the double range, which the library would
// clamp. Most numbers of an overlay are written that way already.
func appendNumber(dst, v []byte) ([]byte, error) {
	if isSafeInteger(v) || isPlainDecimal(v) {
		return append(dst, v...), nil
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if errors.Is(err, strconv.ErrRange) {
		return dst, errNumberRange
	}
	if f == 0 {
		f = 0 // -0 and -0.0 are 0
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if n := len(dst); format == 'e' && dst[n-4] == 'e' && dst[n-2] == '0' {
		// Go writes the exponent in two digits at least, ECMAScript not:
		// 1e-07 is 1e-7, 1e+07 cannot happen (below 1e21 is 'f').
		dst[n-2] = dst[n-1]
		dst = dst[:n-1]
	}
	return dst, nil
}

func (w *canonicalWriter) appendObject(dst, v []byte) ([]byte, error) {
	w.depth++
	defer func() { w.depth-- }()
	if w.beyondLimit(w.depth) {
		return dst, errTooDeep
	}
	base, plain := w.collect(v)
	defer w.release(base)
	return w.appendMembers(dst, v, base, plain)
}

// collect pushes the members of the object v onto the member stack and
// returns where they start; plain says every name is plain ASCII.
func (w *canonicalWriter) collect(v []byte) (base int, plain bool) {
	base, plain = len(w.members), true
	for i := skipSpace(v, 1); v[i] != '}'; {
		nameEnd := endOfString(v, i) + 1
		name := v[i:nameEnd]
		plain = plain && plainASCIIString(name)
		i = skipSpace(v, skipSpace(v, nameEnd)+1) // past the ':'
		valueEnd := w.endOf(v, i)
		w.members = append(w.members, rawMember{name: name, value: v[i:valueEnd]})
		i = skipSpace(v, valueEnd)
		if v[i] == ',' {
			i = skipSpace(v, i+1)
		}
	}
	return base, plain
}

// release pops the members pushed by the collect call that returned base.
func (w *canonicalWriter) release(base int) { w.members = w.members[:base] }

// appendMembers appends the canonical form of the object v, whose members
// collect pushed from base.
func (w *canonicalWriter) appendMembers(dst, v []byte, base int, plain bool) ([]byte, error) {
	if !plain {
		// Unescaping and UTF-16 ordering of names: the library's job. It
		// does not count depth: v itself is at w.depth.
		if w.limited && w.beyondLimit(w.depth+nesting(v)-1) {
			return dst, errTooDeep
		}
		return w.appendByLibrary(dst, v)
	}
	// Plain ASCII names sort by UTF-16 code units exactly as by bytes; the
	// decoder refused duplicates, so there are no ties.
	sortMembers(w.members[base:])
	dst = append(dst, '{')
	for k := base; k < len(w.members); k++ {
		if k > base {
			dst = append(dst, ',')
		}
		m := w.members[k] // by index: nested objects may grow the stack
		dst = append(dst, m.name...)
		dst = append(dst, ':')
		var err error
		if dst, err = w.appendAt(dst, m.value); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// sortMembers sorts by name. Objects here are small (a candidate has
// about a dozen members), where insertion sort beats the general one.
func sortMembers(ms []rawMember) {
	if len(ms) > 16 {
		slices.SortFunc(ms, func(a, b rawMember) int { return bytes.Compare(unquoted(a.name), unquoted(b.name)) })
		return
	}
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && nameLess(ms[j].name, ms[j-1].name); j-- {
			ms[j], ms[j-1] = ms[j-1], ms[j]
		}
	}
}

// nameLess orders two plain raw names by their content. The quotes must
// not take part: '"' sorts after ' ' and '!', so "a!" would come before
// "a" when the closing quote is compared.
func nameLess(a, b []byte) bool {
	a, b = unquoted(a), unquoted(b)
	if len(a) > 0 && len(b) > 0 && a[0] != b[0] {
		return a[0] < b[0] // most names differ in their first letter
	}
	return string(a) < string(b)
}

func unquoted(raw []byte) []byte { return raw[1 : len(raw)-1] }

func (w *canonicalWriter) appendArray(dst, v []byte) ([]byte, error) {
	w.depth++
	defer func() { w.depth-- }()
	if w.beyondLimit(w.depth) {
		return dst, errTooDeep
	}
	dst = append(dst, '[')
	first := true
	for i := skipSpace(v, 1); v[i] != ']'; {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		end := w.endOf(v, i)
		var err error
		if dst, err = w.appendAt(dst, v[i:end]); err != nil {
			return dst, err
		}
		i = skipSpace(v, end)
		if v[i] == ',' {
			i = skipSpace(v, i+1)
		}
	}
	return append(dst, ']'), nil
}

// appendByLibrary canonicalises v with the library, after refusing a
// number beyond the double range, which the library would clamp.
func (w *canonicalWriter) appendByLibrary(dst, v []byte) ([]byte, error) {
	if err := checkNumbers(v); err != nil {
		return dst, err
	}
	w.scratch = append(w.scratch[:0], v...)
	if err := w.scratch.Canonicalize(canonicalizeOptions...); err != nil {
		return dst, err
	}
	return append(dst, w.scratch...), nil
}

// containerEnds holds where every container of a root value opens and
// ends, in the order they open, so that both lists are sorted by opening.
type containerEnds struct {
	built       bool
	opens, ends []int32
}

func (c *containerEnds) reset() {
	c.built = false
	c.opens, c.ends = c.opens[:0], c.ends[:0]
}

// of returns the index just past the container that opens at root[i].
func (c *containerEnds) of(root []byte, i int) int {
	if !c.built {
		c.build(root)
	}
	k, found := slices.BinarySearch(c.opens, int32(i))
	if !found {
		return endOfValue(root, i) // cannot happen for a checked value
	}
	return int(c.ends[k])
}

// build finds every container's end in one pass over root.
func (c *containerEnds) build(root []byte) {
	c.built = true
	var open []int // indices into opens of the containers not yet closed
	for i := 0; i < len(root); i++ {
		switch root[i] {
		case '"':
			i = endOfString(root, i)
		case '{', '[':
			open = append(open, len(c.opens))
			c.opens = append(c.opens, int32(i))
			c.ends = append(c.ends, int32(len(root)))
		case '}', ']':
			if n := len(open); n > 0 {
				c.ends[open[n-1]] = int32(i + 1)
				open = open[:n-1]
			}
		}
	}
}

// endOfValue returns the index just past the valid JSON value that starts
// at v[i].
func endOfValue(v []byte, i int) int {
	switch v[i] {
	case '"':
		return endOfString(v, i) + 1
	case '{', '[':
		depth := 0
		for ; i < len(v); i++ {
			switch v[i] {
			case '"':
				i = endOfString(v, i)
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(v)
	case 't', 'n':
		return i + 4
	case 'f':
		return i + 5
	}
	for i < len(v) && isNumberByte(v[i]) {
		i++
	}
	return i
}

func skipSpace(v []byte, i int) int {
	for i < len(v) && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r') {
		i++
	}
	return i
}

// plainASCIIString reports whether a raw JSON string is printable ASCII
// without escapes, and so already canonical.
func plainASCIIString(raw []byte) bool {
	if len(raw) < 2 || raw[0] != '"' {
		return false
	}
	for _, c := range raw[1 : len(raw)-1] {
		if c < 0x20 || c >= 0x80 || c == '\\' {
			return false
		}
	}
	return true
}

// isSafeInteger reports whether a JSON number is an integer literal of at
// most 15 digits other than -0: a double holds it exactly and ECMAScript
// prints it as written.
func isSafeInteger(v []byte) bool {
	digits := bytes.TrimPrefix(v, []byte("-"))
	if len(digits) < len(v) && len(digits) > 0 && digits[0] == '0' {
		return false // -0
	}
	return len(digits) > 0 && len(digits) <= 15 && allDigits(digits)
}

// isPlainDecimal reports whether a JSON number with a fraction is written
// the way ECMAScript prints its double: no exponent, no trailing zero in
// the fraction, at most 15 significant digits (a double tells all such
// decimals apart, so none shorter reads back as the same double), and a
// magnitude of at least 1e-6 (below that ECMAScript uses an exponent; at
// 1e21 and above too, but 15 digits never get there).
func isPlainDecimal(v []byte) bool {
	if len(v) > 0 && v[0] == '-' {
		v = v[1:]
	}
	dot := bytes.IndexByte(v, '.')
	if dot <= 0 || dot == len(v)-1 || v[len(v)-1] == '0' {
		return false
	}
	whole, fraction := v[:dot], v[dot+1:]
	if !allDigits(whole) || !allDigits(fraction) {
		return false
	}
	significant := len(whole) + len(fraction)
	if whole[0] == '0' { // 0.xxx: leading zeros of the fraction do not count
		zeros := len(fraction) - len(bytes.TrimLeft(fraction, "0"))
		if zeros >= 6 {
			return false
		}
		significant = len(fraction) - zeros
	}
	return significant <= 15
}

func allDigits(v []byte) bool {
	for _, c := range v {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
