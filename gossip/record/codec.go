package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gridsync/gridsync/trust/bundle"
)

// The gossip messages of the membership layer. Each is one type byte and
// a JSON body; memberlist encrypts and authenticates them on the wire.
const (
	MsgRecords byte = 1 // records, by broadcast, reliable send or join
	MsgDigest  byte = 2 // record versions, on periodic push/pull
	MsgNotice  byte = 3 // a member suspected, or alive after all
	MsgDirect  byte = 4 // records sent straight to every member: not passed on
)

// Limits a decoded message must keep. Anything beyond them is dropped and
// counted; nothing a peer sends can make the agent hold more.
const (
	MaxMessageBytes   = 8 << 20 // a join's full state
	maxCertPEMBytes   = 16 << 10
	maxAddressBytes   = 262 // host (253) : port
	maxProviders      = 1000
	maxModels         = 64
	MaxSignals        = 4096
	maxSignalLabels   = 16
	maxNameBytes      = 253
	maxLabelBytes     = 63 // a region or a zone, as the CRD bounds them
	maxSelectorBytes  = 4096
	maxRecordsPerMsg  = MaxRecords // a join's full state is what a store holds
	maxDigestsPerMsg  = MaxRecords
	maxDigestNetworks = 1024
	maxPhaseBytes     = 32
	maxKindFieldBytes = 64
)

// Reasons a message is dropped (the reason label of
// grid_swim_messages_dropped_total).
const (
	DropOversized   = "oversized"
	DropMalformed   = "malformed"
	DropInvalid     = "invalid"
	DropUnknownType = "unknown_type"
	DropPrivateKey  = "private_key"
)

var DropReasons = append([]string{DropOversized, DropMalformed, DropInvalid, DropUnknownType, DropPrivateKey}, capReasons...)

// decodeError carries the reason a message was dropped.
type decodeError struct {
	reason string
	err    error
}

func (e *decodeError) Error() string { return e.reason + ": " + e.err.Error() }

func dropped(reason string, format string, args ...any) error {
	return &decodeError{reason: reason, err: fmt.Errorf(format, args...)}
}

// DropReason is the counted reason of a decode error.
func DropReason(err error) string {
	var de *decodeError
	if errors.As(err, &de) {
		return de.reason
	}
	return DropMalformed
}

type recordsMsgBody struct {
	Records []Record `json:"r"`
	// At is when a join's state was sent (Unix milliseconds): the stream
	// gate refuses a push/pull whose time is stale, so that a captured
	// request cannot be replayed later. Unset on other messages.
	At int64 `json:"at,omitempty"`
}

type DigestBody struct {
	// From is the sender's member name: the records it lacks are sent
	// back to it.
	From    string        `json:"f"`
	Entries []DigestEntry `json:"e"`
	// Networks are those the sender takes part in: it is sent the
	// records of these only (it would refuse the others).
	Networks []string `json:"nw,omitempty"`
	// At is when the digest was sent (Unix milliseconds), as a join's
	// records carry it.
	At int64 `json:"at,omitempty"`
}

func EncodeRecords(rs []Record) ([]byte, error) {
	return encode(MsgRecords, recordsMsgBody{Records: rs})
}

func EncodeDirectRecords(rs []Record) ([]byte, error) {
	return encode(MsgDirect, recordsMsgBody{Records: rs})
}

// EncodeState is a join's full state, stamped with when it is sent.
func EncodeState(rs []Record, at time.Time) ([]byte, error) {
	return encode(MsgRecords, recordsMsgBody{Records: rs, At: at.UnixMilli()})
}

func EncodeDigest(from string, d []DigestEntry, networks []string, at time.Time) ([]byte, error) {
	return encode(MsgDigest, DigestBody{From: from, Entries: d, Networks: networks, At: at.UnixMilli()})
}

func encode(t byte, body any) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	return append([]byte{t}, b...), nil
}

// Notice makes SWIM's suspicion visible to every site: memberlist
// keeps a member's suspect state to itself, so the site whose probe failed
// says so, and the suspected site, when alive, answers.
type Notice struct {
	// Member is the memberlist name concerned.
	Member string `json:"m"`
	// Suspect, or false: alive after all (sent by Member itself).
	Suspect bool `json:"x,omitempty"`
	// Leaving: Member is leaving on purpose (sent by Member itself before
	// it leaves; memberlist does not tell a departure from a death).
	Leaving bool `json:"l,omitempty"`
	// At orders the notices of one sender (its clock, nanoseconds).
	At uint64 `json:"t"`
}

func EncodeNotice(n Notice) ([]byte, error) { return encode(MsgNotice, n) }

// Message is a decoded message: records, a digest or a notice.
type Message struct {
	Type    byte       // MsgRecords, MsgDirect, MsgDigest or MsgNotice
	Records []Record   // of MsgRecords and MsgDirect
	Digest  DigestBody // of MsgDigest
	Notice  Notice     // of MsgNotice
}

// Decode parses and checks one message. It never panics on any input
// (fuzzed) and bounds everything it keeps.
func Decode(buf []byte) (Message, error) {
	if len(buf) == 0 {
		return Message{}, dropped(DropUnknownType, "empty message")
	}
	if len(buf) > MaxMessageBytes {
		return Message{}, dropped(DropOversized, "message of %d bytes, limit %d", len(buf), MaxMessageBytes)
	}
	m := Message{Type: buf[0]}
	switch buf[0] {
	case MsgRecords, MsgDirect:
		records, err := decodeRecords(buf[1:])
		if err != nil {
			return Message{}, err
		}
		for i := range records {
			if err := checkRecord(&records[i]); err != nil {
				return Message{}, err
			}
		}
		m.Records = records
	case MsgDigest:
		if err := json.Unmarshal(buf[1:], &m.Digest); err != nil {
			return Message{}, dropped(DropMalformed, "digest: %v", err)
		}
		if len(m.Digest.Entries) > maxDigestsPerMsg {
			return Message{}, dropped(DropOversized, "%d digest entries", len(m.Digest.Entries))
		}
		if len(m.Digest.From) == 0 || len(m.Digest.From) > maxNameBytes+32 {
			return Message{}, dropped(DropInvalid, "digest sender %q", TruncateForLog(m.Digest.From))
		}
		for _, e := range m.Digest.Entries {
			if err := checkIdentity(e.Network, e.Site, e.Kind); err != nil {
				return Message{}, err
			}
		}
		if len(m.Digest.Networks) > maxDigestNetworks {
			return Message{}, dropped(DropOversized, "%d networks in a digest", len(m.Digest.Networks))
		}
		for _, n := range m.Digest.Networks {
			if len(n) == 0 || len(n) > maxNameBytes {
				return Message{}, dropped(DropInvalid, "a digest network of %d bytes", len(n))
			}
		}
	case MsgNotice:
		if err := json.Unmarshal(buf[1:], &m.Notice); err != nil {
			return Message{}, dropped(DropMalformed, "notice: %v", err)
		}
		if len(m.Notice.Member) == 0 || len(m.Notice.Member) > maxNameBytes+32 {
			return Message{}, dropped(DropInvalid, "notice member %q", TruncateForLog(m.Notice.Member))
		}
	default:
		return Message{}, dropped(DropUnknownType, "message type %d", buf[0])
	}
	return m, nil
}

func checkIdentity(network, site string, kind Kind) error {
	if errs := validation.IsDNS1123Subdomain(network); len(errs) > 0 {
		return dropped(DropInvalid, "network %q: %s", TruncateForLog(network), errs[0])
	}
	if errs := validation.IsDNS1123Label(site); len(errs) > 0 {
		return dropped(DropInvalid, "site %q: %s", TruncateForLog(site), errs[0])
	}
	if kind != KindSite && kind != KindProviders && kind != KindSignals {
		return dropped(DropInvalid, "record kind %q", TruncateForLog(string(kind)))
	}
	return nil
}

// checkRecord bounds every field of a received record.
func checkRecord(r *Record) error {
	if err := checkIdentity(r.Network, r.Site, r.Kind); err != nil {
		return err
	}
	if len(r.GatewayAddress) > maxAddressBytes {
		return dropped(DropOversized, "gateway address of %d bytes", len(r.GatewayAddress))
	}
	if len(r.CertPEM) > maxCertPEMBytes {
		return dropped(DropOversized, "certificate PEM of %d bytes", len(r.CertPEM))
	}
	if len(r.Providers) > maxProviders {
		return dropped(DropOversized, "%d providers", len(r.Providers))
	}
	if len(r.Grid) > maxNameBytes {
		return dropped(DropOversized, "grid ID of %d bytes", len(r.Grid))
	}
	if len(r.Chain) > maxChainCerts || len(r.Sig) > maxSigBytes {
		return dropped(DropOversized, "%d signing certificates, a signature of %d bytes", len(r.Chain), len(r.Sig))
	}
	for _, der := range r.Chain {
		if len(der) == 0 || len(der) > maxCertBytes {
			return dropped(DropOversized, "a signing certificate of %d bytes", len(der))
		}
	}
	if len(r.Region) > maxLabelBytes || len(r.Zone) > maxLabelBytes {
		return dropped(DropOversized, "region or zone of more than %d bytes", maxLabelBytes)
	}
	if len(r.TrustBundle) > bundle.MaxSignedSize {
		return dropped(DropOversized, "a trust bundle of %d bytes", len(r.TrustBundle))
	}
	site := r.GatewayAddress != "" || r.CertPEM != "" || r.Region != "" || r.Zone != "" || len(r.TrustBundle) > 0
	if r.Kind == KindSite && (len(r.Providers) > 0 || len(r.Signals) > 0) ||
		r.Kind == KindProviders && (site || len(r.Signals) > 0) ||
		r.Kind == KindSignals && (site || len(r.Providers) > 0) {
		return dropped(DropInvalid, "fields of another record kind in a %s record", r.Kind)
	}
	if len(r.Signals) > MaxSignals {
		return dropped(DropOversized, "%d signals", len(r.Signals))
	}
	for _, sg := range r.Signals {
		if len(sg.Provider) == 0 || len(sg.Provider) > maxNameBytes || len(sg.Metric) == 0 || len(sg.Metric) > maxNameBytes ||
			len(sg.Labels) > maxSignalLabels || sg.AgeMs < 0 || math.IsNaN(sg.Value) || math.IsInf(sg.Value, 0) {
			return dropped(DropInvalid, "a signal of provider %q is malformed", TruncateForLog(sg.Provider))
		}
		for k, v := range sg.Labels {
			if len(k) == 0 || len(k) > maxNameBytes || len(v) > maxNameBytes {
				return dropped(DropInvalid, "a signal of provider %q has a malformed label", TruncateForLog(sg.Provider))
			}
		}
	}
	for _, p := range r.Providers {
		if len(p.Name) == 0 || len(p.Name) > maxNameBytes || len(p.Cluster) > maxNameBytes ||
			len(p.Phase) > maxPhaseBytes || len(p.ProviderKind) > maxKindFieldBytes || len(p.BackendKind) > maxKindFieldBytes ||
			len(p.Sites) > maxSelectorBytes {
			return dropped(DropInvalid, "provider %q: a field is empty or too long", TruncateForLog(p.Name))
		}
		if len(p.Models) > maxModels {
			return dropped(DropOversized, "provider %q: %d models", TruncateForLog(p.Name), len(p.Models))
		}
		for _, m := range p.Models {
			if len(m) == 0 || len(m) > maxNameBytes {
				return dropped(DropInvalid, "provider %q: a model name is empty or too long", TruncateForLog(p.Name))
			}
		}
	}
	return nil
}

// TruncateForLog keeps a peer's string short enough for a log line.
func TruncateForLog(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// Certificate material as the reference checks it on receipt: structure
// only, it is not trusted for that.
const (
	pemCertificateHeader = "-----BEGIN CERTIFICATE-----"
	pemPrivateKeyMarker  = "PRIVATE KEY"
)

// CertState classifies a gossiped PEM.
type CertState int

const (
	CertNone CertState = iota
	CertValid
	CertInvalid    // no certificate header: TrustMaterialInvalid
	CertPrivateKey // carries a private key: discarded
)

func ClassifyPEM(pem string) CertState {
	switch {
	case pem == "":
		return CertNone
	case strings.Contains(pem, pemPrivateKeyMarker):
		return CertPrivateKey
	case !strings.Contains(pem, pemCertificateHeader):
		return CertInvalid
	default:
		return CertValid
	}
}

// decodeRecords reads a records body one record at a time, refusing it as
// soon as it holds more than maxRecordsPerMsg: a message of a hundred
// thousand small records is never decoded whole (its decoded form is
// many times its size).
func decodeRecords(b []byte) ([]Record, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	malformed := func(err error) error { return dropped(DropMalformed, "records: %v", err) }
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, malformed(fmt.Errorf("not an object"))
	}
	var out []Record
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, malformed(err)
		}
		if key != "r" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, malformed(err)
			}
			continue
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('[') {
			if t == nil && err == nil {
				continue // "r": null
			}
			return nil, malformed(fmt.Errorf("records are not a list"))
		}
		for dec.More() {
			if len(out) >= maxRecordsPerMsg {
				return nil, dropped(DropOversized, "more than %d records", maxRecordsPerMsg)
			}
			var r Record
			if err := dec.Decode(&r); err != nil {
				return nil, malformed(err)
			}
			out = append(out, r)
		}
		if _, err := dec.Token(); err != nil {
			return nil, malformed(err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, malformed(err)
	}
	return out, nil
}
