package envelope

import (
	"encoding/hex"
	"fmt"

	"github.com/go-json-experiment/json/jsontext"
)

// digestInput holds the overlay members that the content digest covers,
// already checked by overlayMembers.decode (which also refuses numbers
// beyond the double range, which canonicalisation would clamp). Raw
// subtrees are digested, never a re-serialised Go struct: an additive
// candidate field that the producer digested must be digested here too,
// or a newer producer's overlay would look tampered with.
type digestInput struct {
	Network         jsontext.Value
	LocalSite       jsontext.Value
	Candidates      *canonicalOut  // has taken the object up to the candidates
	SelectionPolicy jsontext.Value // absent when nil
}

// appendTail appends the canonical members that follow "candidates":
// local_site, network and selection_policy (their names sort that way),
// and the closing brace.
func (d digestInput) appendTail(dst []byte) ([]byte, error) {
	var w canonicalWriter
	var err error
	dst = append(dst, `,"local_site":`...)
	if dst, err = w.appendValue(dst, d.LocalSite); err != nil {
		return dst, err
	}
	dst = append(dst, `,"network":`...)
	if dst, err = w.appendValue(dst, d.Network); err != nil {
		return dst, err
	}
	if d.SelectionPolicy != nil {
		dst = append(dst, `,"selection_policy":`...)
		if dst, err = w.appendValue(dst, d.SelectionPolicy); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

const canonicalHead = `{"candidates":`

// finish completes the canonical form; call it once.
func (d digestInput) finish() error {
	tail, err := d.appendTail(make([]byte, 0, 128))
	if err != nil {
		return fmt.Errorf("canonicalise overlay: %w", err)
	}
	d.Candidates.write(tail)
	return nil
}

// digest returns the hex sha256 of the canonical form; call it once.
func (d digestInput) digest() (string, error) {
	if err := d.finish(); err != nil {
		return "", err
	}
	return hex.EncodeToString(d.Candidates.hash.Sum(nil)), nil
}

// Digest returns the semantic content digest (lowercase hex sha256) of an
// overlay object given as raw JSON: the JCS canonical form of its
// candidates, local_site and network members, plus selection_policy when
// present. Timestamps and any other member are not digested.
func Digest(overlay []byte) (string, error) {
	var members overlayMembers
	if err := decodeWithCandidates(overlay, &members, decodeOptions{}); err != nil {
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
	if err := decodeWithCandidates(overlay, &members, decodeOptions{keepCanonical: true}); err != nil {
		return nil, fmt.Errorf("decode overlay: %w", err)
	}
	in, _, rej := members.decode()
	if rej != nil {
		return nil, rej
	}
	if err := in.finish(); err != nil {
		return nil, err
	}
	return in.Candidates.kept.Bytes(), nil
}
