package envelope

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"hash"
	"strconv"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// candidateField is the JSON type a documented candidate member must have.
type candidateField int

const (
	fieldString candidateField = iota
	fieldRequiredString
	fieldBool
	fieldNumber
	fieldInteger
	fieldObject
)

// candidateMember types every documented candidate member and says which
// required bit it sets; unknown (additive) members are allowed and still
// digested. A switch, not a map: this runs for every member of every
// candidate.
func candidateMember(name []byte) (field candidateField, required uint8, known bool) {
	switch string(name) {
	case "kind":
		return fieldRequiredString, 1, true
	case "name":
		return fieldRequiredString, 2, true
	case "site":
		return fieldRequiredString, 4, true
	case "cluster":
		return fieldRequiredString, 8, true
	case "fresh":
		return fieldBool, 16, true
	case "credential", "score_breakdown":
		return fieldObject, 0, true
	case "stable_id", "admission_state", "selection_tier":
		return fieldString, 0, true
	case "score":
		return fieldNumber, 0, true
	case "rank", "selection_group", "selection_weight":
		return fieldInteger, 0, true
	}
	return 0, 0, false
}

const allRequired = 1 | 2 | 4 | 8 | 16

// candidateList is overlay.candidates: its raw JSON, its RFC 8785 form
// for the digest, and its length. It is checked and canonicalised while
// the envelope is decoded, token by token in the same pass that reads it:
// at 1 MiB overlays a second pass, let alone a reflective decode, does not
// fit the validator's budget.
type candidateList struct {
	raw   jsontext.Value
	count int
	// depth is how many containers enclose the array in the document.
	depth int
	// canonical has taken `{"candidates":` and the array's canonical form;
	// the digest goes on from there.
	canonical *canonicalOut
}

// decodeOptions say what decodeWithCandidates does besides decoding.
type decodeOptions struct {
	// keepCanonical keeps the canonical bytes as well as their hash.
	keepCanonical bool
	// limitDepth refuses candidates nested beyond MaxDepth in the
	// document (validation; the producer's Digest takes any depth).
	limitDepth bool
}

// decodeWithCandidates unmarshals data into v, walking every candidateList
// on the way and slicing its raw JSON out of data.
func decodeWithCandidates(data []byte, v any, opts decodeOptions) error {
	walk := json.UnmarshalFromFunc(func(dec *jsontext.Decoder, list *candidateList) error {
		list.canonical = newCanonicalOut(opts.keepCanonical)
		list.depth = dec.StackDepth()
		return list.walk(dec, data, opts.limitDepth)
	})
	return json.Unmarshal(data, v, json.WithUnmarshalers(walk))
}

// canonicalOut hashes the canonical form of the digested object as it is
// produced, so that an overlay's worth of canonical bytes never has to be
// held, and keeps the bytes only when asked to.
type canonicalOut struct {
	hash hash.Hash
	kept *bytes.Buffer
}

func newCanonicalOut(keep bool) *canonicalOut {
	out := &canonicalOut{hash: sha256.New()}
	if keep {
		out.kept = new(bytes.Buffer)
	}
	out.write([]byte(canonicalHead))
	return out
}

func (o *canonicalOut) write(p []byte) {
	o.hash.Write(p)
	if o.kept != nil {
		o.kept.Write(p)
	}
}

// flushAt is how many canonical bytes the walk gathers before handing
// them on: big enough to make the calls cheap, small enough to stay in
// cache.
const flushAt = 8 << 10

// walk reads the array at the decoder's position. Structural findings are
// returned as a *Rejection.
func (l *candidateList) walk(dec *jsontext.Decoder, data []byte, limitDepth bool) error {
	if dec.PeekKind() != '[' {
		return reject(ReasonMalformedStructure, "overlay.candidates must be an array")
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	start := int(dec.InputOffset()) - 1 // the '['
	buf := append(make([]byte, 0, min(len(data)-start, flushAt)+1<<10), '[')
	l.count = 0
	var canon canonicalWriter
	if limitDepth {
		// The canonicaliser walks every candidate container anyway: it
		// checks the depth there, for free. A candidate sits two levels
		// below the containers enclosing the array.
		canon.limited, canon.maxDepth = true, MaxDepth-(l.depth+2)
		if canon.maxDepth < 0 {
			return errTooDeep
		}
	}
	for dec.PeekKind() != ']' {
		if l.count > 0 {
			buf = append(buf, ',')
		}
		var rej *Rejection
		if buf, rej = checkCandidate(dec, data, l.count, buf, &canon); rej != nil {
			return rej
		}
		if len(buf) >= flushAt {
			l.canonical.write(buf)
			buf = buf[:0]
		}
		l.count++
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	l.raw = data[start:dec.InputOffset()]
	l.canonical.write(append(buf, ']'))
	return nil
}

// checkCandidate checks the candidate at the decoder's position and
// appends its canonical form to canonical. The decoder checks it as JSON
// (syntax, UTF-8, duplicate names) in one call; one scan of those trusted
// bytes then checks the members and canonicalises them.
func checkCandidate(dec *jsontext.Decoder, data []byte, i int, canonical []byte, w *canonicalWriter) ([]byte, *Rejection) {
	if dec.PeekKind() != '{' {
		return canonical, reject(ReasonMalformedStructure, "overlay.candidates[%d] must be an object", i)
	}
	raw, err := dec.ReadValue()
	if err != nil {
		return canonical, reject(ReasonMalformedStructure, "overlay.candidates[%d]: %v", i, err)
	}
	// A slice of data stays valid after the next read; the decoder's own
	// result need not.
	end := int(dec.InputOffset())
	raw = data[end-len(raw) : end]

	base, plain := w.collectRoot(raw)
	defer w.release(base)
	if rej := checkCandidateMembers(w.members[base:], i); rej != nil {
		return canonical, rej
	}
	if canonical, err = w.appendMembers(canonical, raw, base, plain); err != nil {
		return canonical, reject(ReasonMalformedStructure, "overlay.candidates[%d]: %v", i, err)
	}
	return canonical, nil
}

// checkCandidateMembers checks the types of the documented members of
// candidate i and that the required ones are there.
func checkCandidateMembers(members []rawMember, i int) *Rejection {
	var seen uint8
	for _, m := range members {
		if rej := checkCandidateMember(i, m.name, m.value, &seen); rej != nil {
			return rej
		}
	}
	return checkCandidateRequired(i, seen)
}

// checkCandidateMember checks one member of candidate i, given by its raw
// name and value, and adds the required member it is to seen.
func checkCandidateMember(i int, rawName, value []byte, seen *uint8) *Rejection {
	name := memberName(rawName)
	field, required, known := candidateMember(name)
	if !known {
		return nil
	}
	if !fieldValueOK(field, value) {
		return reject(ReasonMalformedStructure, "overlay.candidates[%d].%s has the wrong type", i, name)
	}
	*seen |= required
	return nil
}

func checkCandidateRequired(i int, seen uint8) *Rejection {
	if seen != allRequired {
		return reject(ReasonMalformedStructure, "overlay.candidates[%d] needs kind, name, site, cluster and fresh", i)
	}
	return nil
}

// memberName returns an object member's name from its raw JSON string,
// without allocating unless the name contains escapes ("\u006bind" is
// "kind" to every JSON reader, so it must be to this one).
func memberName(raw jsontext.Value) []byte {
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw[1 : len(raw)-1]
	}
	var name string
	if err := json.Unmarshal(raw, &name); err != nil {
		return raw
	}
	return []byte(name)
}

func fieldValueOK(field candidateField, v jsontext.Value) bool {
	switch field {
	case fieldRequiredString:
		return v.Kind() == '"' && len(v) > 2
	case fieldString:
		return v.Kind() == '"'
	case fieldBool:
		return v.Kind() == 't' || v.Kind() == 'f'
	case fieldNumber:
		return v.Kind() == '0'
	case fieldInteger:
		return v.Kind() == '0' && isInt64(v)
	case fieldObject:
		return v.Kind() == '{'
	}
	return false
}

// isInt64 reports whether a JSON number is written as an integer that
// fits int64 (no fraction, no exponent), as a typed consumer requires.
func isInt64(v []byte) bool {
	digits := bytes.TrimPrefix(v, []byte("-"))
	if len(digits) == 0 || !allDigits(digits) {
		return false
	}
	if len(digits) < 19 {
		return true
	}
	_, err := strconv.ParseInt(string(v), 10, 64)
	return err == nil
}

// checkNumbers refuses a number that an IEEE 754 double cannot hold, in a
// scalar or anywhere inside a nested value. RFC 8785 is defined over
// doubles and the canonicaliser would clamp 1e400 to the largest double,
// so two different documents would share one digest. Only literals with an
// exponent or of 309 or more digits can overflow, so most numbers are
// accepted without being parsed.
func checkNumbers(v []byte) error {
	switch {
	case len(v) == 0:
		return nil
	case v[0] == '{' || v[0] == '[':
		return checkNestedNumbers(v)
	case v[0] == '-' || (v[0] >= '0' && v[0] <= '9'):
		return checkNumber(v)
	}
	return nil
}

func checkNumber(v []byte) error {
	if len(v) < 309 && !bytes.ContainsAny(v, "eE") {
		return nil
	}
	if _, err := strconv.ParseFloat(string(v), 64); errors.Is(err, strconv.ErrRange) {
		return errNumberRange
	}
	return nil
}

var errNumberRange = errors.New("a number is out of the IEEE 754 double range")

// checkNestedNumbers scans a valid JSON object or array for numbers,
// skipping over strings.
func checkNestedNumbers(v []byte) error {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '"' {
			i = endOfString(v, i)
			continue
		}
		if c != '-' && (c < '0' || c > '9') {
			continue
		}
		j := i
		for j < len(v) && isNumberByte(v[j]) {
			j++
		}
		if err := checkNumber(v[i:j]); err != nil {
			return err
		}
		i = j - 1
	}
	return nil
}

// endOfString returns the index of the quote closing the string that
// opens at v[start]. Most strings of an overlay are a few bytes long,
// where a plain loop beats a vectorised search.
func endOfString(v []byte, start int) int {
	for i := start + 1; i < len(v); i++ {
		switch v[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return len(v)
}

func isNumberByte(c byte) bool {
	return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}
