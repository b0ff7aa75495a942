package envelope

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/go-json-experiment/json/jsontext"
)

// canonicalizeOptions skip what the decoding pass has already refused:
// every digestInput comes from decodeWithCandidates, whose decoder rejects
// duplicate member names and invalid UTF-8 anywhere in the overlay.
// Checking again costs a tenth of the validator's time.
var canonicalizeOptions = []jsontext.Options{
	jsontext.AllowDuplicateNames(true),
	jsontext.AllowInvalidUTF8(true),
}

// digestInput holds the raw JSON of the overlay members that the content
// digest covers, already checked by overlayMembers.decode (which also
// refuses numbers beyond the double range, which canonicalisation would
// clamp). Raw subtrees are digested, never a re-serialised Go struct:
// an additive candidate field that the producer digested must be digested
// here too, or a newer producer's overlay would look tampered with.
type digestInput struct {
	Network         jsontext.Value
	LocalSite       jsontext.Value
	Candidates      jsontext.Value
	SelectionPolicy jsontext.Value // absent when nil
}

// canonical returns the RFC 8785 canonical form of
// {"candidates", "local_site", "network"[, "selection_policy"]}.
func (d digestInput) canonical() ([]byte, error) {
	size := len(d.Network) + len(d.LocalSite) + len(d.Candidates) + len(d.SelectionPolicy) + 64
	obj := make(jsontext.Value, 0, size)
	obj = append(obj, `{"candidates":`...)
	obj = append(obj, d.Candidates...)
	obj = append(obj, `,"local_site":`...)
	obj = append(obj, d.LocalSite...)
	obj = append(obj, `,"network":`...)
	obj = append(obj, d.Network...)
	if d.SelectionPolicy != nil {
		obj = append(obj, `,"selection_policy":`...)
		obj = append(obj, d.SelectionPolicy...)
	}
	obj = append(obj, '}')
	// Canonicalize applies RFC 8785: members sorted by UTF-16 code units,
	// numbers in ECMAScript form (3.0 -> 3, 1e-07 -> 1e-7), minimal string
	// escaping (no HTML escaping of <>&, U+2028/2029 left as is). It also
	// rejects duplicate member names and invalid UTF-8, which RFC 8785
	// requires (I-JSON) and which would otherwise make the digest ambiguous.
	if err := obj.Canonicalize(canonicalizeOptions...); err != nil {
		return nil, fmt.Errorf("canonicalise overlay: %w", err)
	}
	return obj, nil
}

func (d digestInput) digest() (string, error) {
	canon, err := d.canonical()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// Digest returns the semantic content digest (lowercase hex sha256) of an
// overlay object given as raw JSON: the JCS canonical form of its
// candidates, local_site and network members, plus selection_policy when
// present. Timestamps and any other member are not digested.
func Digest(overlay []byte) (string, error) {
	var members overlayMembers
	if err := decodeWithCandidates(overlay, &members); err != nil {
		return "", fmt.Errorf("decode overlay: %w", err)
	}
	in, _, rej := members.decode()
	if rej != nil {
		return "", rej
	}
	return in.digest()
}

// CanonicalOverlay returns the exact bytes that Digest hashes, for tools
// and tests that need to show them.
func CanonicalOverlay(overlay []byte) ([]byte, error) {
	var members overlayMembers
	if err := decodeWithCandidates(overlay, &members); err != nil {
		return nil, fmt.Errorf("decode overlay: %w", err)
	}
	in, _, rej := members.decode()
	if rej != nil {
		return nil, rej
	}
	return in.canonical()
}
