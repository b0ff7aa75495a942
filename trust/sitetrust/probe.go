package sitetrust

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/gridsync/gridsync/shared/keypolicy"
	"github.com/gridsync/gridsync/shared/redial"
)

// Reasons of a GridSite's status, the reference's names.
const (
	ReasonTLSVerified           = "TlsVerified"
	ReasonGatewayAddressMissing = "GatewayAddressMissing"
	// ReasonGatewayEndpointInvalid: the GridSite's gateway endpoint does
	// not read one way (gridsync's: the reference says such an endpoint
	// is not routable, and names no reason).
	ReasonGatewayEndpointInvalid = "GatewayEndpointInvalid"
	ReasonTrustMaterialMissing   = "TrustMaterialMissing"
	ReasonTrustMaterialInvalid   = "TrustMaterialInvalid"
	ReasonUntrustedIssuer        = "UntrustedIssuer"
	ReasonIdentityMismatch       = "IdentityMismatch"
	ReasonCertificateExpired     = "CertificateExpired"
	ReasonCertificateNotYetValid = "CertificateNotYetValid"
	ReasonPinMismatch            = "PinMismatch"
	ReasonHandshakeTimeout       = "HandshakeTimeout"
	ReasonTLSProtocolError       = "TlsProtocolError"
	ReasonAdvertisedCertMismatch = "AdvertisedCertMismatch"
	// ReasonSiteEvicted: the network's issuer evicted the site, or its
	// gateway's certificate dates from before an eviction since lifted.
	ReasonSiteEvicted = "SiteEvicted"
	// Connection failures (the upstream operator's names).
	ReasonConnectionFailed = "ConnectionFailed"
	ReasonConnectTimeout   = "ConnectTimeout"
	// ReasonIdentityVerificationRequired: Plaintext mode reached the
	// gateway, which proves nothing about who it is.
	ReasonIdentityVerificationRequired = "IdentityVerificationRequired"
)

// Kind is what an outcome does to a site's phase.
type Kind int

const (
	// Verified promotes the site to Active.
	Verified Kind = iota
	// TrustFailure keeps or demotes the site to Connecting.
	TrustFailure
	// ConnectionFailure demotes an Active site to Unreachable.
	ConnectionFailure
	// AddressMissing: nothing to probe (Discovered, or Unreachable for a
	// site that was Active).
	AddressMissing
)

// Outcome is the result of one probe: a closed set of reasons, and a
// message that never carries what the server sent.
type Outcome struct {
	Kind    Kind
	Reason  string
	Message string
	// chainVerified: the gateway had proved a certificate of the grid CA
	// when this outcome was reached.
	chainVerified bool
}

func fail(kind Kind, reason, format string, args ...any) Outcome {
	return Outcome{Kind: kind, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Target is what one mutual-TLS probe checks.
type Target struct {
	// Address is the gateway's host:port.
	Address string
	// ServerName is the SNI and the exact DNS SAN the leaf must carry.
	ServerName string
	// Roots are the grid CA's certificates.
	Roots *x509.CertPool
	// Client is this site's certificate and key.
	Client tls.Certificate
	// Pins are the accepted leaf fingerprints (pinned mode), canonical
	// or in upstream's earlier PEM form.
	Pins []string
	// SPIFFE admits any leaf the grid CA signed for Site with the SVID
	// profile, and reads no pins.
	SPIFFE bool
	Site   string
	// Timeout bounds the whole probe: connect, handshake, and the wait
	// for the gateway's verdict on this site's certificate.
	Timeout time.Duration
	// Dial connects to Address; a plain dialer when nil. The agent's
	// applies the probe destination rule: a site's address comes from
	// gossip or from whoever may write a GridSite, and the probe presents
	// this site's client certificate to it.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Revoked, when set, refuses a leaf the network's trust bundle
	// refuses: one of an evicted site, or from before its eviction.
	Revoked func(leaf *x509.Certificate) bool
	// ClientAuthWindow is how long a TLS 1.3 gateway is given to refuse
	// this site's certificate after the handshake (a TLS 1.3 server
	// judges it after the client finished): DefaultClientAuthWindow when
	// zero. A session ticket from the gateway ends the wait early: a
	// server sends one only to a client it accepted.
	ClientAuthWindow time.Duration
}

// DefaultClientAuthWindow is how long a refusal of this site's
// certificate is waited for.
const DefaultClientAuthWindow = 100 * time.Millisecond

// errRefused stops a handshake whose peer failed verification; the
// outcome says why.
var errRefused = errors.New("gateway certificate refused")

// Probe makes one bounded mutual-TLS connection to the gateway and checks
// the CA chain, the DNS SAN, the pin (or the SVID profile) against the live
// leaf, and that the gateway accepts this site's certificate. Nothing is
// sent over the connection.
func Probe(ctx context.Context, t Target) Outcome {
	deadline := time.Now().Add(t.Timeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	conn, err := dialWith(t.Dial)(ctx, "tcp", t.Address)
	if err != nil {
		if isTimeout(err) || errors.Is(err, context.DeadlineExceeded) {
			return fail(ConnectionFailure, ReasonConnectTimeout, "connecting to %s timed out after %s", t.Address, t.Timeout)
		}
		return fail(ConnectionFailure, ReasonConnectionFailed, "connecting to %s failed (%s)", t.Address, dialFailure(err))
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(deadline)

	// VerifyConnection runs inside the handshake, on this goroutine.
	var verdict *Outcome
	chainVerified := false
	tickets := &ticketSignal{conn: conn}
	cfg := &tls.Config{
		// Verification is VerifyConnection's, below: it names the reason
		// (issuer, validity, name, pin) where the standard check would
		// stop at the first without saying which.
		InsecureSkipVerify: true,
		ServerName:         t.ServerName,
		Certificates:       []tls.Certificate{t.Client},
		MinVersion:         tls.VersionTLS12,
		ClientSessionCache: tickets,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if verdict = t.verify(cs.PeerCertificates, time.Now()); verdict != nil {
				return errRefused
			}
			chainVerified = true
			return nil
		},
	}
	tc := tls.Client(conn, cfg)
	err = tc.HandshakeContext(ctx)
	if verdict != nil {
		return *verdict
	}
	if err != nil {
		o := fail(TrustFailure, ReasonTLSProtocolError, "the TLS handshake with %s failed (%s)", t.Address, tlsFailure(err))
		if isTimeout(err) || errors.Is(err, context.DeadlineExceeded) {
			o = fail(TrustFailure, ReasonHandshakeTimeout, "%s accepted the connection but did not complete a TLS handshake within %s", t.Address, t.Timeout)
		}
		// After the gateway proved a grid certificate (TLS 1.2 refuses
		// this site's certificate inside the handshake).
		o.chainVerified = chainVerified
		return o
	}
	if tc.ConnectionState().Version == tls.VersionTLS13 {
		window := t.ClientAuthWindow
		if window <= 0 {
			window = DefaultClientAuthWindow
		}
		until := time.Now().Add(window)
		if until.After(deadline) {
			until = deadline
		}
		_ = conn.SetReadDeadline(until)
		var b [1]byte
		_, err := tc.Read(b[:])
		switch {
		case err == nil, isTimeout(err):
			// Accepted: no refusal within the window, a session ticket,
			// or the gateway spoke first.
		case errors.Is(err, io.EOF):
			return Outcome{Kind: TrustFailure, Reason: ReasonTLSProtocolError, chainVerified: true,
				Message: fmt.Sprintf("%s closed the connection right after the handshake: it did not accept this site's client certificate", t.Address)}
		default:
			return Outcome{Kind: TrustFailure, Reason: ReasonTLSProtocolError, chainVerified: true,
				Message: fmt.Sprintf("%s refused this site's client certificate (%s)", t.Address, tlsFailure(err))}
		}
	}
	return Outcome{Kind: Verified, Reason: ReasonTLSVerified,
		Message: "mutual TLS verified: chain to the grid CA, " + t.identityNote() + ", client certificate accepted"}
}

func (t Target) identityNote() string {
	if t.SPIFFE {
		return "SPIFFE ID " + SPIFFEID(t.Site)
	}
	return "server name " + t.ServerName + " and a pinned leaf"
}

// verify checks the gateway's chain; nil when it is trusted. Its keys are
// checked before any signature made with them; then the issuer, at a
// time the leaf is valid, so that a leaf of another CA reads as such
// whatever its dates.
func (t Target) verify(certs []*x509.Certificate, now time.Time) *Outcome {
	refuse := func(reason, format string, args ...any) *Outcome {
		o := fail(TrustFailure, reason, format, args...)
		return &o
	}
	if len(certs) == 0 {
		return refuse(ReasonTLSProtocolError, "the gateway presented no certificate")
	}
	// The keys first: a signature made with an invented key of an
	// unbounded size costs a tenth of a second and more to check. The
	// message names no peer material.
	if keypolicy.CheckChain(certs) != nil {
		return refuse(ReasonUntrustedIssuer, "the gateway's chain holds more than %d certificates or a key of a kind or size gridsync does not accept (ECDSA P-256 or P-384, Ed25519, RSA of %d to %d bits)",
			keypolicy.MaxChain, keypolicy.MinRSABits, keypolicy.MaxRSABits)
	}
	leaf := certs[0]
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	opts := x509.VerifyOptions{Roots: t.Roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	opts.CurrentTime = leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) / 2)
	if _, err := leaf.Verify(opts); err != nil {
		var invalid x509.CertificateInvalidError
		switch {
		case errors.As(err, &invalid) && invalid.Reason == x509.IncompatibleUsage:
			return refuse(ReasonIdentityMismatch, "the gateway's certificate is not for server authentication")
		case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
			// A CA of the chain is not valid then: judged at now below.
		default:
			return refuse(ReasonUntrustedIssuer, "the gateway's certificate does not chain to the grid CA")
		}
	}
	switch {
	case now.Before(leaf.NotBefore):
		return refuse(ReasonCertificateNotYetValid, "the gateway's certificate is valid from %s", leaf.NotBefore.UTC().Format(time.RFC3339))
	case now.After(leaf.NotAfter):
		return refuse(ReasonCertificateExpired, "the gateway's certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if t.Revoked != nil && t.Revoked(leaf) {
		return refuse(ReasonSiteEvicted, "the gateway's certificate is refused by the network's trust bundle: its site is evicted, or it dates from before an eviction since lifted")
	}
	opts.CurrentTime = now
	if _, err := leaf.Verify(opts); err != nil {
		var invalid x509.CertificateInvalidError
		if errors.As(err, &invalid) && invalid.Reason == x509.Expired {
			return refuse(ReasonCertificateExpired, "a CA certificate of the gateway's chain is not valid now")
		}
		return refuse(ReasonUntrustedIssuer, "the gateway's certificate does not chain to the grid CA")
	}
	// The exact name: a wildcard would let one certificate stand for
	// every site.
	if !slices.ContainsFunc(leaf.DNSNames, func(n string) bool { return strings.EqualFold(n, t.ServerName) }) {
		return refuse(ReasonIdentityMismatch, "the gateway's certificate has no DNS SAN %s", t.ServerName)
	}
	if t.SPIFFE {
		if err := CheckSVID(leaf, t.Site); err != nil {
			return refuse(ReasonIdentityMismatch, "the gateway's certificate is not site %s's SVID: %s", t.Site, err)
		}
		return nil
	}
	// Signed by the grid CA, but for no site (an infrastructure
	// certificate, for a database or a listener): a pin on it does not
	// make it a site's gateway. (SPIFFE mode refuses it above: it is no
	// site's SVID.)
	if NamesNoSite(leaf) {
		return refuse(ReasonIdentityMismatch, "the gateway's certificate names no site (no organization, no SPIFFE ID): an infrastructure certificate of the grid CA stands for no site")
	}
	if !Pinned(t.Pins, leaf.Raw) {
		return refuse(ReasonPinMismatch, "the gateway's live certificate %s matches no pin of spec.trust", Fingerprint(leaf.Raw))
	}
	return nil
}

// PlaintextProbe is Plaintext mode: a bounded TCP connection, for
// diagnostics only. Reaching the gateway never makes the site routable.
func PlaintextProbe(ctx context.Context, address string, timeout time.Duration, dial func(ctx context.Context, network, addr string) (net.Conn, error)) Outcome {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := dialWith(dial)(ctx, "tcp", address)
	if err != nil {
		if isTimeout(err) || errors.Is(err, context.DeadlineExceeded) {
			return fail(ConnectionFailure, ReasonConnectTimeout, "connecting to %s timed out after %s", address, timeout)
		}
		return fail(ConnectionFailure, ReasonConnectionFailed, "connecting to %s failed (%s)", address, dialFailure(err))
	}
	_ = conn.Close()
	return fail(TrustFailure, ReasonIdentityVerificationRequired,
		"Plaintext mode: %s accepts connections, which proves nothing about who it is; the site is never routable in this mode", address)
}

// dialWith is dial (a plain dialer when nil) making a new connect when
// one goes unanswered (see redial): a lost SYN over a lossy link costs a
// probe a second and a half at most, not the kernel's 3 or 7 s, which
// could pass the probe's bound and demote an Active site.
func dialWith(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return redial.Dialer(maxProbeTimeout, dial)
}

// maxProbeTimeout bounds a connect whose context has no deadline (the
// probe's always has one: its Timeout).
const maxProbeTimeout = time.Minute

// Opaque is the outcome as told for an address learnt from gossip: every
// failure before the gateway proved a certificate of the grid CA (a
// closed, silent, plain-HTTP or other-CA port) reads alike, and no
// message names the address, so that a GridSite's status never maps
// what answers at an internal address. A failure after the chain
// verified (a pin, a name, a validity) keeps its reason: only a gateway
// of the grid gets that far.
func (o Outcome) Opaque(address string) Outcome {
	if o.chainVerified || o.Kind == Verified {
		if address != "" {
			o.Message = strings.ReplaceAll(o.Message, address, "the gateway")
		}
		return o
	}
	switch o.Reason {
	case ReasonConnectTimeout, ReasonConnectionFailed, ReasonHandshakeTimeout, ReasonTLSProtocolError, ReasonUntrustedIssuer,
		ReasonIdentityVerificationRequired:
		return Outcome{Kind: ConnectionFailure, Reason: ReasonConnectionFailed,
			Message: "the gateway address this site advertises did not complete a mutual TLS handshake with a certificate of the grid CA (the agent's log says more)"}
	}
	if address != "" {
		o.Message = strings.ReplaceAll(o.Message, address, "the gateway")
	}
	return o
}

// ticketSignal is the probe's session cache: it never resumes (every
// probe checks the live leaf), and a ticket the gateway sends, which a
// server does only for a client it accepted, ends the wait for a refusal.
type ticketSignal struct{ conn net.Conn }

func (t *ticketSignal) Get(string) (*tls.ClientSessionState, bool) { return nil, false }

func (t *ticketSignal) Put(string, *tls.ClientSessionState) {
	_ = t.conn.SetReadDeadline(time.Now())
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// dialFailure names a connection failure without the resolver's or the
// system's words.
func dialFailure(err error) string {
	var dns *net.DNSError
	var denied interface{ DestinationDenied() bool }
	var scoped interface{ AddressScope() string }
	switch {
	case errors.As(err, &denied) && denied.DestinationDenied():
		return "the destination is not allowed (--probe-allow-destinations)"
	case errors.As(err, &scoped):
		return scoped.AddressScope()
	case errors.As(err, &dns):
		return "the name does not resolve"
	case strings.Contains(err.Error(), "refused"):
		return "connection refused"
	case strings.Contains(err.Error(), "unreachable"):
		return "network unreachable"
	case strings.Contains(err.Error(), "missing port"), strings.Contains(err.Error(), "too many colons"):
		return "the address is not host:port"
	default:
		return "connection failed"
	}
}

// tlsFailure names a TLS failure by its kind: a TLS alert's description is
// the protocol's, anything else is summarized.
func tlsFailure(err error) string {
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &rh):
		return "the gateway does not speak TLS"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the gateway closed the connection"
	case strings.Contains(err.Error(), "remote error: tls: "):
		return "alert: " + err.Error()[strings.Index(err.Error(), "tls: ")+5:]
	case strings.Contains(err.Error(), "connection reset"):
		return "the gateway reset the connection"
	default:
		return "protocol error"
	}
}

// Verify checks a peer's presented chain as a probe does (the grid CA,
// the exact DNS name, and the pin or the SPIFFE ID of Site); nil when it
// is trusted. For connections other than the probe: the signals poll.
func (t Target) Verify(certs []*x509.Certificate, now time.Time) error {
	if o := t.verify(certs, now); o != nil {
		return errors.New(o.Reason + ": " + o.Message)
	}
	return nil
}
