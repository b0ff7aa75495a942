package envelope

import (
	"bytes"
	"math"
	"sync"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// fastDecoder decodes the envelopes producers write in one pass of its
// own: it checks the document as JSON, keeps every value's place on a
// tape with each object's members sorted by name, and then fills a wireTop
// from the tape, canonicalising the candidates straight from it.
//
// The general path reads a document twice: the library's decoder checks
// it, then the canonicaliser scans each candidate again to sort its
// members and find where they end. On a 64 KiB overlay that was most of a
// sidecar's CPU per update. The fast path takes only what it can decide
// alone: printable ASCII strings without escapes (so names sort bytewise
// and strings are already canonical), numbers in JSON's grammar, nesting
// within MaxDepth, no duplicate names, and members and candidates whose
// types are right. On anything else (an escape, a non-ASCII byte, an
// error of any kind) it gives up and the general path decides, with its
// reasons and messages, so every rule keeps a single implementation of its
// verdict. FuzzFastDecodeAgrees holds the two to the same result.
type fastDecoder struct {
	data []byte
	// nodes is the tape: each container's members or elements are one
	// block, written when the container ends (children before parents).
	nodes []node
	// stack holds the members of the containers still open.
	stack []node
	out   []byte
}

// node is one value on the tape, by offsets into the document: a few
// thousand of them per 64 KiB overlay, so they are kept small.
type node struct {
	// name and nameEnd hold a member's name, quotes included (0, 0 for an
	// array's element); value and valueEnd its value.
	name, nameEnd, value, valueEnd int32
	// first and count place a container's block on the tape.
	first, count int32
	// key is a member's name's first eight bytes, big-endian, zero-padded:
	// it orders most names without looking at them (no name holds a zero
	// byte on the fast path, so a shorter name still sorts first).
	key uint64
}

func nameKey(name []byte) uint64 {
	var k uint64
	for i := range 8 {
		k <<= 8
		if i < len(name) {
			k |= uint64(name[i])
		}
	}
	return k
}

// less orders two members by name.
func (d *fastDecoder) less(a, b *node) bool {
	if a.key != b.key {
		return a.key < b.key
	}
	return string(unquoted(d.nameOf(*a))) < string(unquoted(d.nameOf(*b)))
}

var fastDecoders = sync.Pool{New: func() any { return new(fastDecoder) }}

var colon, openBrace, openBracket = []byte{':'}, []byte{'{'}, []byte{'['}

// fastDecode fills top as decodeWithCandidates(data, top, {limitDepth})
// would and returns true, or returns false having left top unusable, for
// the general path to decide.
func fastDecode(data []byte, top *wireTop) bool {
	if len(data) > math.MaxInt32 {
		return false
	}
	d := fastDecoders.Get().(*fastDecoder)
	defer func() {
		d.data, d.nodes, d.stack = nil, d.nodes[:0], d.stack[:0]
		fastDecoders.Put(d)
	}()
	d.data = data
	// The tape sized once: grown by doubling, a 4 MiB envelope's tape was
	// allocated about twice over and held one and a half times at its
	// largest. Each value on the tape is a member (one ':'), an object or
	// an array; scalar array elements, which envelopes hardly have, grow
	// it past the estimate.
	if want := bytes.Count(data, colon) + bytes.Count(data, openBrace) + bytes.Count(data, openBracket); cap(d.nodes) < want {
		d.nodes = make([]node, 0, want)
	}
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	end, root, ok := d.value(i, 0)
	if !ok || skipSpace(data, end) != len(data) {
		return false
	}
	return d.fill(root, top)
}

func (d *fastDecoder) nameOf(n node) []byte  { return d.data[n.name:n.nameEnd] }
func (d *fastDecoder) valueOf(n node) []byte { return d.data[n.value:n.valueEnd] }

func (d *fastDecoder) block(n node) []node {
	return d.nodes[n.first : n.first+n.count]
}

// at returns data[i], or 0 (never valid where a token is expected) past
// the end.
func (d *fastDecoder) at(i int) byte {
	if i < len(d.data) {
		return d.data[i]
	}
	return 0
}

// plainStringByte are the bytes a string may hold on the fast path.
var plainStringByte = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// value scans the value at data[i], depth containers deep, and returns
// the index just past it and the value as a node without a name (a
// container's block placed on the tape).
func (d *fastDecoder) value(i, depth int) (end int, v node, ok bool) {
	switch d.at(i) {
	case '{', '[':
		end, v.first, v.count, ok = d.container(i, depth+1)
	case '"':
		end, ok = d.string(i)
	case 't':
		end, ok = d.literal(i, "true")
	case 'f':
		end, ok = d.literal(i, "false")
	case 'n':
		end, ok = d.literal(i, "null")
	default:
		end, ok = d.number(i)
	}
	v.value, v.valueEnd = int32(i), int32(end)
	return end, v, ok
}

func (d *fastDecoder) string(i int) (int, bool) {
	j := i + 1
	for j < len(d.data) && plainStringByte[d.data[j]] {
		j++
	}
	if d.at(j) != '"' {
		return 0, false
	}
	return j + 1, true
}

func (d *fastDecoder) literal(i int, lit string) (int, bool) {
	end := i + len(lit)
	if end > len(d.data) || string(d.data[i:end]) != lit {
		return 0, false
	}
	return end, true
}

// number scans JSON's number grammar; what follows is the caller's to
// check.
func (d *fastDecoder) number(i int) (int, bool) {
	digits := func(j int) int {
		for c := d.at(j); c >= '0' && c <= '9'; c = d.at(j) {
			j++
		}
		return j
	}
	j := i
	if d.at(j) == '-' {
		j++
	}
	switch c := d.at(j); {
	case c == '0':
		j++
	case c >= '1' && c <= '9':
		j = digits(j + 1)
	default:
		return 0, false
	}
	if d.at(j) == '.' {
		k := digits(j + 1)
		if k == j+1 {
			return 0, false
		}
		j = k
	}
	if c := d.at(j); c == 'e' || c == 'E' {
		j++
		if c := d.at(j); c == '+' || c == '-' {
			j++
		}
		k := digits(j)
		if k == j {
			return 0, false
		}
		j = k
	}
	return j, true
}

// container scans the object or array opening at data[i], depth
// containers deep, pushing its members or elements and moving them to
// the tape when it ends.
func (d *fastDecoder) container(i, depth int) (end int, first, count int32, ok bool) {
	if depth > MaxDepth {
		return 0, 0, 0, false
	}
	object := d.data[i] == '{'
	closing := byte(']')
	if object {
		closing = '}'
	}
	base := len(d.stack)
	i = skipSpace(d.data, i+1)
	for d.at(i) != closing {
		var name, nameEnd int
		if object {
			if d.at(i) != '"' {
				return 0, 0, 0, false
			}
			if nameEnd, ok = d.string(i); !ok {
				return 0, 0, 0, false
			}
			name = i
			if i = skipSpace(d.data, nameEnd); d.at(i) != ':' {
				return 0, 0, 0, false
			}
			i = skipSpace(d.data, i+1)
		}
		end, m, ok := d.value(i, depth)
		if !ok {
			return 0, 0, 0, false
		}
		if object {
			m.name, m.nameEnd = int32(name), int32(nameEnd)
			m.key = nameKey(d.data[name+1 : nameEnd-1])
		}
		d.stack = append(d.stack, m)
		if i = skipSpace(d.data, end); d.at(i) == ',' {
			// Another member must follow: "[1,]" finds ']' where a value
			// or a name must be, and fails there.
			if i = skipSpace(d.data, i+1); d.at(i) == closing {
				return 0, 0, 0, false
			}
		} else if d.at(i) != closing {
			return 0, 0, 0, false
		}
	}
	if object {
		first, count, ok = d.closeObject(base)
		return i + 1, first, count, ok
	}
	first, count = d.close(base)
	return i + 1, first, count, true
}

// close moves the members pushed since base to the tape.
func (d *fastDecoder) close(base int) (first, count int32) {
	first, count = int32(len(d.nodes)), int32(len(d.stack)-base)
	d.nodes = append(d.nodes, d.stack[base:]...)
	d.stack = d.stack[:base]
	return first, count
}

// closeObject sorts the members pushed since base by name and moves them
// to the tape; a duplicate name is left to the decoder to name.
func (d *fastDecoder) closeObject(base int) (first, count int32, ok bool) {
	members := d.stack[base:]
	// Plain ASCII names sort by UTF-16 code units exactly as by bytes.
	// Objects are small (a candidate has about a dozen members).
	for k := 1; k < len(members); k++ {
		for j := k; j > 0 && d.less(&members[j], &members[j-1]); j-- {
			members[j], members[j-1] = members[j-1], members[j]
		}
	}
	for k := 1; k < len(members); k++ {
		if !d.less(&members[k-1], &members[k]) {
			return 0, 0, false // equal names
		}
	}
	first, count = d.close(base)
	return first, count, true
}

// fill decodes the envelope's members from the tape as the library's
// decoder does into wireTop: unknown members ignored, null leaving a
// pointer nil, raw members kept as they are written.
func (d *fastDecoder) fill(root node, top *wireTop) bool {
	for _, m := range d.block(root) {
		value := d.valueOf(m)
		var ok bool
		switch string(unquoted(d.nameOf(m))) {
		case "schema_version":
			top.SchemaVersion, ok = jsontext.Value(value), true
		case "revision":
			ok = json.Unmarshal(value, &top.Revision) == nil
		case "content_digest":
			ok = json.Unmarshal(value, &top.ContentDigest) == nil
		case "scope":
			ok = json.Unmarshal(value, &top.Scope) == nil
		case "provenance":
			ok = json.Unmarshal(value, &top.Provenance) == nil
		case "overlay":
			ok = d.fillOverlay(m, &top.Overlay)
		default:
			ok = d.fillOverlayMember(m, &top.overlayMembers, 1)
		}
		if !ok {
			return false
		}
	}
	return true
}

func (d *fastDecoder) fillOverlay(m node, overlay **overlayMembers) bool {
	switch d.data[m.value] {
	case 'n':
		*overlay = nil
		return true
	case '{':
		*overlay = new(overlayMembers)
		for _, om := range d.block(m) {
			if !d.fillOverlayMember(om, *overlay, 2) {
				return false
			}
		}
		return true
	}
	return false
}

// fillOverlayMember takes one of the digested members; others are
// ignored. depth is how many objects enclose the member.
func (d *fastDecoder) fillOverlayMember(m node, o *overlayMembers, depth int) bool {
	switch string(unquoted(d.nameOf(m))) {
	case "network":
		o.Network = jsontext.Value(d.valueOf(m))
	case "local_site":
		o.LocalSite = jsontext.Value(d.valueOf(m))
	case "selection_policy":
		o.SelectionPolicy = jsontext.Value(d.valueOf(m))
	case "candidates":
		return d.candidates(m, &o.Candidates, depth)
	}
	return true
}

// candidates checks every candidate's members and canonicalises the list
// into the digest, as candidateList.walk does.
func (d *fastDecoder) candidates(m node, l *candidateList, depth int) bool {
	if d.data[m.value] != '[' {
		return false
	}
	*l = candidateList{raw: jsontext.Value(d.valueOf(m)), depth: depth, canonical: newCanonicalOut(false)}
	out := d.out[:0]
	out = append(out, '[')
	for k, c := range d.block(m) {
		if d.data[c.value] != '{' {
			return false
		}
		var seen uint8
		for _, cm := range d.block(c) {
			if checkCandidateMember(k, d.nameOf(cm), d.valueOf(cm), &seen) != nil {
				return false
			}
		}
		if checkCandidateRequired(k, seen) != nil {
			return false
		}
		if k > 0 {
			out = append(out, ',')
		}
		var ok bool
		if out, ok = d.appendCanonical(out, c); !ok {
			return false
		}
		if len(out) >= flushAt {
			l.canonical.write(out)
			out = out[:0]
		}
		l.count++
	}
	l.canonical.write(append(out, ']'))
	d.out = out[:0]
	return true
}

// appendCanonical appends the RFC 8785 form of a scanned value: its
// object members are sorted already and its strings plain.
func (d *fastDecoder) appendCanonical(dst []byte, n node) ([]byte, bool) {
	value := d.valueOf(n)
	switch value[0] {
	case '{', '[':
		dst = append(dst, value[0])
		for k, m := range d.block(n) {
			if k > 0 {
				dst = append(dst, ',')
			}
			if m.nameEnd > 0 {
				dst = append(append(dst, d.data[m.name:m.nameEnd]...), ':')
			}
			if c := d.data[m.value]; c == '"' || c == 't' || c == 'f' || c == 'n' {
				dst = append(dst, d.data[m.value:m.valueEnd]...) // already canonical
				continue
			}
			var ok bool
			if dst, ok = d.appendCanonical(dst, m); !ok {
				return dst, false
			}
		}
		return append(dst, value[len(value)-1]), true
	case '"', 't', 'f', 'n':
		return append(dst, value...), true
	}
	dst, err := appendNumber(dst, value)
	return dst, err == nil
}
