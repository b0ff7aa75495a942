package envelope

import (
	"bytes"
	"errors"
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

// candidateFields types every documented candidate member; unknown
// (additive) members are allowed and still digested.
var candidateFields = map[string]candidateField{
	"kind":            fieldRequiredString,
	"name":            fieldRequiredString,
	"site":            fieldRequiredString,
	"cluster":         fieldRequiredString,
	"fresh":           fieldBool,
	"credential":      fieldObject,
	"stable_id":       fieldString,
	"admission_state": fieldString,
	"selection_tier":  fieldString,
	"score":           fieldNumber,
	"score_breakdown": fieldObject,
	"rank":            fieldInteger,
	"selection_group": fieldInteger,
}

// requiredMembers are tracked as bits while a candidate is walked.
var requiredMembers = map[string]uint8{"kind": 1, "name": 2, "site": 4, "cluster": 8, "fresh": 16}

const allRequired = 1 | 2 | 4 | 8 | 16

// candidateList is overlay.candidates: its raw JSON, kept for the digest,
// and its length. It is checked while the envelope is decoded, token by
// token in the same pass that reads it: at 1 MiB overlays a second pass,
// let alone a reflective decode, does not fit the validator's budget.
type candidateList struct {
	raw   jsontext.Value
	count int
}

// decodeWithCandidates unmarshals data into v, walking every candidateList
// on the way and slicing its raw JSON out of data.
func decodeWithCandidates(data []byte, v any) error {
	walk := json.UnmarshalFromFunc(func(dec *jsontext.Decoder, list *candidateList) error {
		return list.walk(dec, data)
	})
	return json.Unmarshal(data, v, json.WithUnmarshalers(walk))
}

// walk reads the array at the decoder's position. Structural findings are
// returned as a *Rejection.
func (l *candidateList) walk(dec *jsontext.Decoder, data []byte) error {
	if dec.PeekKind() != '[' {
		return reject(ReasonMalformedStructure, "overlay.candidates must be an array")
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	start := int(dec.InputOffset()) - 1 // the '['
	l.count = 0
	for dec.PeekKind() != ']' {
		if rej := checkCandidate(dec, l.count); rej != nil {
			return rej
		}
		l.count++
	}
	if _, err := dec.ReadToken(); err != nil {
		return err
	}
	l.raw = data[start:dec.InputOffset()]
	return nil
}

func checkCandidate(dec *jsontext.Decoder, i int) *Rejection {
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return reject(ReasonMalformedStructure, "overlay.candidates[%d] must be an object", i)
	}
	var seen uint8
	for dec.PeekKind() != '}' {
		rawName, err := dec.ReadValue()
		if err != nil {
			return reject(ReasonMalformedStructure, "overlay.candidates[%d]: %v", i, err)
		}
		name := memberName(rawName)
		value, err := dec.ReadValue()
		if err != nil {
			return reject(ReasonMalformedStructure, "overlay.candidates[%d].%s: %v", i, name, err)
		}
		if err := checkNumbers(value); err != nil {
			return reject(ReasonMalformedStructure, "overlay.candidates[%d].%s: %v", i, name, err)
		}
		// Indexing with string(name) does not allocate.
		field, known := candidateFields[string(name)]
		if !known {
			continue
		}
		if !fieldValueOK(field, value) {
			return reject(ReasonMalformedStructure, "overlay.candidates[%d].%s has the wrong type", i, name)
		}
		seen |= requiredMembers[string(name)]
	}
	if _, err := dec.ReadToken(); err != nil {
		return reject(ReasonMalformedStructure, "overlay.candidates[%d]: %v", i, err)
	}
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
	digits := v
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
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
// opens at v[start].
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
