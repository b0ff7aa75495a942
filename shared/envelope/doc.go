// Package envelope is the overlay wire contract in Go: it validates routing
// overlay envelopes the way the Praxis gateway does, computes their semantic
// digest with RFC 8785 (JCS) canonicalisation, and builds envelopes
// byte-for-byte as the Grid operator writes them.
//
// The consumer side (Validate) decides accept or reject with one reason from
// a small closed set, so that reasons can be used as metric labels. The
// producer side (Build) and the consumer side share one digest function, so
// Validate(Build(x)) always accepts with the digest Build reported.
package envelope
