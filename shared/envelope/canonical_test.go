package envelope_test

import (
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/gridsync/gridsync/shared/envelope"
)

// libraryCanonical is the reference: the digested members put together
// and canonicalised by the library in one call.
func libraryCanonical(t *testing.T, overlay []byte) []byte {
	t.Helper()
	var m struct {
		Network         jsontext.Value `json:"network"`
		LocalSite       jsontext.Value `json:"local_site"`
		Candidates      jsontext.Value `json:"candidates"`
		SelectionPolicy jsontext.Value `json:"selection_policy"`
	}
	if err := json.Unmarshal(overlay, &m); err != nil {
		t.Fatalf("accepted overlay does not decode: %v", err)
	}
	obj := jsontext.Value(`{"candidates":` + string(m.Candidates) + `,"local_site":` + string(m.LocalSite) + `,"network":` + string(m.Network))
	if m.SelectionPolicy != nil {
		obj = append(obj, `,"selection_policy":`+string(m.SelectionPolicy)...)
	}
	obj = append(obj, '}')
	if err := obj.Canonicalize(); err != nil {
		t.Fatalf("library refuses what the validator accepted: %v", err)
	}
	return obj
}

// canonicalSeeds cover every path of the candidate fast path and every
// reason to leave a value to the library.
var canonicalSeeds = []string{
	`{"network":"n","local_site":"s","candidates":[]}`,
	`{"network":"n","local_site":"s","candidates":[{"site":"s","name":"m","kind":"k","fresh":true,"cluster":"c","rank":12,"x":null,"y":false}]}`,
	"{\n \"candidates\" : [ { \"kind\" : \"k\" , \"name\" : \"m\" ,\t\"site\":\"s\", \"cluster\":\"c\", \"fresh\":false } ,{\"kind\":\"k\",\"name\":\"m2\",\"site\":\"s\",\"cluster\":\"c\",\"fresh\":true} ] ,\n \"network\" : \"n\", \"local_site\":\"s\" }",
	`{"network":"n\u0041","local_site":"s\/","candidates":[{"kind":"\u006b","name":"m\n","site":"\u00e9","cluster":"c","fresh":true}]}`,
	`{"network":"n","local_site":"s","candidates":[{"kind":"k","name":"m","site":"s","cluster":"c","fresh":true,"\u0072ank":1,"\u20ac":1,"\ud83d\ude00":2,"\r":3,"é":4}]}`,
	`{"network":"n","local_site":"s","candidates":[{"kind":"k","name":"m","site":"s","cluster":"c","fresh":true,"a!":1,"a":2,"a ":3,"":4,"~":5,"A":6}]}`,
	`{"network":"n","local_site":"s","candidates":[{"kind":"k","name":"m","site":"s","cluster":"c","fresh":true,"a":-0,"b":1e2,"c":1.50,"d":123456789012345,"e":1234567890123456,"f":-123456789012345,"g":0,"h":-1,"i":9007199254740993,"j":-0.0}]}`,
	`{"network":"n","local_site":"s","candidates":[{"kind":"k","name":"m","site":"s","cluster":"c","fresh":true,"credential":{ "strategy":"bearer_token","secret_ref":{"namespace":"ns","name":"x","key":"k"}},"score_breakdown":{"total":1.0E0,"cost":3},"list":[ 1 , "a\u0000" , {"z":1,"a":2} ]}]}`,
	`{"network":"n","local_site":"s","candidates":[{"kind":"k","name":"m","site":"s","cluster":"c","fresh":true}],"selection_policy":{"mode":"weighted","weights":{"b":1.0,"a":2e-7}}}`,
	// Numbers written otherwise than ECMAScript prints their double.
	`{"network":"n","local_site":"s","candidates":[{"kind":"k","name":"m","site":"s","cluster":"c","fresh":true,"n":[1e-7,1E-7,1e21,1e+21,9.99e20,0.30000000000000004,123456789012345678901234,-1e-400,5e-324,1.7976931348623157e308,0.000001,0.0000001,-0.0e5,100e-2]}]}`,
	"{\"network\":\"n\",\"local_site\":\"s\",\"candidates\":[{\"kind\":\"k\",\"name\":\"\u2028\x7f<>&\",\"site\":\"s\",\"cluster\":\"c\",\"fresh\":true}]}",
	// Deep enough for the canonicaliser's table of container ends.
	`{"network":"n","local_site":"s","candidates":[{"kind":"k","name":"m","site":"s","cluster":"c","fresh":true,"x":` +
		strings.Repeat(`{"b":[1,{"z":2,"a":`, 12) + "1" + strings.Repeat("}]}", 12) + `}],"selection_policy":{"mode":"m","d":` +
		strings.Repeat(`[{"y":0,"x":`, 12) + "1" + strings.Repeat("}]", 12) + `}}`,
}

// FuzzCanonicalMatchesLibrary holds the validator's incremental RFC 8785
// form byte for byte equal to the library's canonicalisation of the whole
// digested object.
//
//	go test ./shared/envelope -run '^$' -fuzz FuzzCanonicalMatchesLibrary -fuzztime 1m
func FuzzCanonicalMatchesLibrary(f *testing.F) {
	for _, seed := range canonicalSeeds {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, overlay []byte) {
		got, err := envelope.CanonicalOverlay(overlay)
		if err != nil {
			return
		}
		if want := libraryCanonical(t, overlay); string(got) != string(want) {
			t.Fatalf("canonical form differs from the library's\n got: %s\nwant: %s", got, want)
		}
	})
}

func TestCanonicalSeedsAreAccepted(t *testing.T) {
	// The seeds are only worth their place if they reach the comparison.
	for _, seed := range canonicalSeeds {
		if _, err := envelope.CanonicalOverlay([]byte(seed)); err != nil {
			t.Errorf("seed refused: %v\n%s", err, seed)
		}
	}
}
