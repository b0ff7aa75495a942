package enrol

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridsync/gridsync/shared/keypolicy"
	"github.com/gridsync/gridsync/trust/sitetrust"
)

// The issuer's paths, on its signals listener. Enrolment is open to a
// caller without a certificate (it has none yet); renewal needs the
// caller's current site certificate.
const (
	EnrollPath = "/v1/grid/enroll"
	RenewPath  = "/v1/grid/renew"
)

// What a request may spend before anything is known of its caller: its
// body is read, to at most maxBodyBytes (a certificate request is well
// under it) and within bodyDeadline, and an enrolment's token is looked
// up in the set of stored hashes (read at most once a quarter second),
// before it takes one of the slots that bound the work behind it (CA
// reads, the token spent, a signature, the site's record written).
// Enrolments (anonymous callers) and renewals (callers with a site
// certificate) have slots of their own, so that a flood of the one
// never starves the other, and an address has one enrolment in flight
// at a time.
const (
	maxBodyBytes = 16 << 10
	bodyDeadline = 3 * time.Second
	enrolSlots   = 4
	renewSlots   = 4
)

// Request is what an enrolling or renewing site sends.
type Request struct {
	Network string `json:"network"`
	// Site is the name the token was issued for (enrolment); a renewal
	// is for the site its client certificate names.
	Site  string `json:"site,omitempty"`
	Token string `json:"token,omitempty"`
	// CSR is a PEM CERTIFICATE REQUEST: only its public key is used.
	CSR string `json:"csr"`
}

// Response is a new site certificate: the leaf, then the grid CA, PEM.
type Response struct {
	Chain string `json:"chain"`
}

// Refusal is why the issuer refused: Reason is one of the Refused*
// values, Message says what to fix.
type Refusal struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// Reasons the issuer refuses a request.
const (
	RefusedToken        = "token_refused"
	RefusedNotIssuer    = "not_issuer"
	RefusedRequest      = "request_invalid"
	RefusedRenewal      = "renewal_refused"
	RefusedIdentity     = "identity_required"
	RefusedBusy         = "busy"
	RefusedIssuerFailed = "issuer_failed"
	RefusedSuperseded   = "certificate_superseded"
	RefusedRenewalRate  = "renewal_rate"
	// RefusedNameRegistered: the site's name is registered under another
	// key; its operator releases it (gridsync-agent release-name) first.
	RefusedNameRegistered = "name_registered"
)

// CA is the grid CA of a network, as the issuer holds it.
type CA interface {
	// Authority returns the network's CA when this site issues for it,
	// and the sites whose renewal and enrolment it refuses; why says
	// otherwise.
	Authority(ctx context.Context, network string) (ca *sitetrust.CA, refuseRenewal []string, why error)
}

// Server answers enrolments and renewals.
type Server struct {
	CAs      CA
	Tokens   *Tokens
	Lifetime time.Duration
	Now      func() time.Time
	Logger   *slog.Logger
	// enrolments and renewals bound the requests that reach the API
	// server at once, each path on its own; enrolling holds the
	// addresses with an enrolment in flight.
	enrolments chan struct{}
	renewals   chan struct{}
	enrolling  addressGate
	superseded supersededSet
	results    *prometheus.CounterVec
}

// NewServer returns a server; reg receives
// grid_site_enrollments_total{path,result}.
func NewServer(cas CA, tokens *Tokens, lifetime time.Duration, logger *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	s := &Server{CAs: cas, Tokens: tokens, Lifetime: lifetime, Now: time.Now, Logger: logger,
		enrolments: make(chan struct{}, enrolSlots), renewals: make(chan struct{}, renewSlots),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "grid_site_enrollments_total",
			Help: "Certificate requests this issuer answered, by path (enroll, renew) and result (issued or the refusal's reason).",
		}, []string{"path", "result"})}
	reads := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "grid_site_enrollment_token_reads_total",
		Help: "Reads of the enrolment token Secret to check a token: at most one a quarter second, whatever callers send.",
	}, func() float64 { return float64(tokens.reads.Load()) })
	if reg != nil {
		for _, c := range []prometheus.Collector{s.results, reads} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// refusal is a request answered with an error.
type refusal struct {
	status  int
	reason  string
	message string
}

func refuse(status int, reason, format string, args ...any) *refusal {
	return &refusal{status: status, reason: reason, message: fmt.Sprintf(format, args...)}
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind := "enroll"
	if r.URL.Path == RenewPath {
		kind = "renew"
	}
	chain, site, network, ref := s.serve(w, r, kind)
	if ref != nil {
		s.results.WithLabelValues(kind, ref.reason).Inc()
		// A refused enrolment comes from a caller nobody knows yet, as
		// often as it likes: counted, and logged at debug only. A refused
		// renewal is a site of the grid's, worth a warning.
		level := slog.LevelDebug
		if kind == "renew" {
			level = slog.LevelWarn
		}
		s.Logger.Log(r.Context(), level, "site_"+kind+"_refused", "reason", ref.reason, "message", ref.message)
		if ref.status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		if r.ProtoMajor == 1 {
			// HTTP/1.1 reads what is left of a body before it answers
			// unless the connection closes after the answer: a refused
			// request's body is not waited for.
			w.Header().Set("Connection", "close")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(ref.status)
		_ = json.NewEncoder(w).Encode(Refusal{Reason: ref.reason, Message: ref.message})
		return
	}
	leaf, _ := sitetrust.ParseCertificates(chain)
	s.results.WithLabelValues(kind, "issued").Inc()
	s.Logger.Info("site_certificate_issued_for", "network", network, "site", site, "path", kind,
		"fingerprint", sitetrust.Fingerprint(leaf[0].Raw), "not_after", leaf[0].NotAfter.UTC().Format(time.RFC3339))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(Response{Chain: string(chain)})
}

// serve checks a request, cheapest first, and issues its certificate.
// The order is the defence: the body is read with a size and a deadline,
// and an enrolment's token looked up among the stored hashes, before any
// slot is taken; the token's shape and the caller's
// certificate are checked before the token Secret or the CA is read; the
// CSR's key is checked for its kind and size before the request is
// checked against the site's record (which needs the key asked for: a
// renewal's, or an enrolment's of a registered name) and before the
// CSR's signature; the token is spent last, so that a request refused
// for its CSR, or for a name registered under another key, loses
// nothing.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, kind string) (chain []byte, site, network string, ref *refusal) {
	if r.Method != http.MethodPost {
		return nil, "", "", refuse(http.StatusMethodNotAllowed, RefusedRequest, "POST only")
	}
	// The deadline is set first, so that nothing read of this request
	// waits longer.
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(bodyDeadline)); err != nil {
		// Every transport of the signals listener bounds a read; one that
		// cannot is refused rather than read without a bound.
		return nil, "", "", refuse(http.StatusInternalServerError, RefusedIssuerFailed, "the request's read cannot be bounded")
	}
	var presented *x509.Certificate
	if kind == "renew" {
		// The caller's current certificate names the site; the listener
		// verified the handshake, and the network's CA is checked below.
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			return nil, "", "", refuse(http.StatusUnauthorized, RefusedIdentity, "a renewal presents the site's current certificate")
		}
		presented = r.TLS.PeerCertificates[0]
		if org := presented.Subject.Organization; len(org) == 1 {
			site = org[0]
		}
	} else {
		release, ok := s.enrolling.enter(r.RemoteAddr)
		if !ok {
			return nil, "", "", refuse(http.StatusTooManyRequests, RefusedBusy, "an enrolment from this address is under way; one at a time")
		}
		defer release()
	}
	req, ref := readRequest(w, r, rc)
	if ref != nil {
		return nil, "", "", ref
	}
	network = req.Network
	if kind == "enroll" {
		site = req.Site
		// A caller without a certificate is known only by its token: one
		// of the wrong shape is refused before anything is read.
		if !tokenShape.MatchString(req.Token) {
			return nil, site, network, refuse(http.StatusForbidden, RefusedToken, "%v", ErrTokenMalformed)
		}
	}
	if err := sitetrust.ValidSiteName(site); err != nil {
		return nil, site, network, refuse(http.StatusBadRequest, RefusedRequest, "%v", err)
	}
	ctx := r.Context()
	now := s.Now()
	if kind == "enroll" {
		// Before a slot is taken: the set of stored hashes is read at most
		// once a quarter second whatever callers send (callers arriving
		// while it is read wait for that one read), so guesses never hold
		// the slots an enrolment with a real token needs.
		held, err := s.Tokens.MayHold(ctx, req.Token, now)
		switch {
		case err != nil:
			return nil, site, network, refuse(http.StatusServiceUnavailable, RefusedIssuerFailed, "the tokens cannot be checked: %v", err)
		case !held:
			return nil, site, network, refuse(http.StatusForbidden, RefusedToken, "%v", ErrTokenUnknown)
		}
	}
	slots := s.enrolments
	if kind == "renew" {
		slots = s.renewals
	}
	select {
	case slots <- struct{}{}:
		defer func() { <-slots }()
	default:
		return nil, site, network, refuse(http.StatusTooManyRequests, RefusedBusy, "the issuer is answering other requests; try again")
	}
	ca, refused, err := s.CAs.Authority(ctx, network)
	if err != nil {
		return nil, site, network, refuse(http.StatusForbidden, RefusedNotIssuer, "%v", err)
	}
	if slices.Contains(refused, site) {
		// Listed: the site neither renews nor enrols, whatever token it
		// holds (one made before it was listed included).
		what := "renewal"
		if kind == "enroll" {
			what = "enrolment"
		}
		return nil, site, network, refuse(http.StatusForbidden, RefusedRenewal, "the issuer refuses site %s's %s (spec.tls.siteCertificate.refuseRenewal or evictedSites: a listed site neither renews nor enrols)", site, what)
	}
	if kind == "renew" {
		if ref := checkPresented(ca, network, site, presented, now); ref != nil {
			return nil, site, network, ref
		}
	}
	csr, err := decodeCSR(req.CSR)
	if err != nil {
		return nil, site, network, refuse(http.StatusBadRequest, RefusedRequest, "%v", err)
	}
	// The key asked for decides what the register allows (a renewal: a
	// new key from the newest certificate, the newest's key again from
	// the previous one; an enrolment: any key for a name not registered,
	// the registered key only for one that is); the signature proving
	// the caller holds it is checked next, before anything is issued.
	requested := spkiFingerprint(csr.RawSubjectPublicKeyInfo)
	if kind == "renew" {
		if ref := s.checkRegister(ctx, network, site, presented, requested, now); ref != nil {
			return nil, site, network, ref
		}
	} else if err := s.Tokens.MayEnrol(ctx, network, site, requested); err != nil {
		return nil, site, network, registerRefusal(err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, site, network, refuse(http.StatusBadRequest, RefusedRequest, "the certificate request is not signed by its own key")
	}
	if kind == "enroll" {
		// The token is spent and the name claimed for this key in one
		// write: a name claimed since the check above is refused here,
		// and the token kept.
		if err := s.Tokens.Claim(ctx, network, site, req.Token, requested, now); err != nil {
			switch {
			case errors.Is(err, ErrTokenMalformed) || errors.Is(err, ErrTokenUnknown) || errors.Is(err, ErrTokenExpired) || errors.Is(err, ErrTokenOtherSite):
				return nil, site, network, refuse(http.StatusForbidden, RefusedToken, "%v", err)
			case errors.Is(err, ErrNameRegistered):
				return nil, site, network, registerRefusal(err)
			}
			return nil, site, network, refuse(http.StatusServiceUnavailable, RefusedIssuerFailed, "the token could not be checked: %v", err)
		}
	}
	chain, err = ca.IssueFor(site, csr.PublicKey, now, s.Lifetime)
	if err != nil {
		return nil, site, network, refuse(http.StatusInternalServerError, RefusedIssuerFailed, "issuing failed: %v", err)
	}
	issued, err := sitetrust.ParseCertificates(chain)
	if err != nil {
		return nil, site, network, refuse(http.StatusInternalServerError, RefusedIssuerFailed, "issuing failed: %v", err)
	}
	// Recorded as the site's newest before it is handed out: a
	// certificate the register does not know never leaves the issuer.
	if err := s.Tokens.RecordIssued(ctx, network, site, presented, issued[0], now); err != nil {
		s.rememberSuperseded(err, network, site, presented, now)
		return nil, site, network, registerRefusal(err)
	}
	return chain, site, network, nil
}

// checkPresented checks the certificate a renewal presents: a current one
// of the network's grid CA, with the site profile.
func checkPresented(ca *sitetrust.CA, network, site string, presented *x509.Certificate, now time.Time) *refusal {
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, other := range ca.Also {
		roots.AddCert(other)
	}
	if _, err := presented.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return refuse(http.StatusUnauthorized, RefusedIdentity, "the certificate presented is not a current certificate of network %s's grid CA", network)
	}
	if err := sitetrust.CheckSVID(presented, site); err != nil {
		return refuse(http.StatusUnauthorized, RefusedIdentity, "the certificate presented is not a site certificate: %v", err)
	}
	if ca.IssueFloor != nil && presented.NotBefore.Before(ca.IssueFloor(site)) {
		// Issued before the site's eviction, which has since been
		// lifted: such a certificate never renews into one the network
		// accepts again. The site comes back by enrolling with a token.
		return refuse(http.StatusForbidden, RefusedRenewal, "the certificate presented dates from before site %s's eviction: it does not renew; the site enrols again with a new token", site)
	}
	return nil
}

// checkRegister checks a renewal against the site's record: from the
// newest certificate for a new key, or a retry from the previous one,
// within the renewal rate.
func (s *Server) checkRegister(ctx context.Context, network, site string, presented *x509.Certificate, requested string, now time.Time) *refusal {
	if err := s.superseded.refusal(network, site, presented, requested); err != nil {
		return registerRefusal(err)
	}
	if err := s.Tokens.MayRenew(ctx, network, site, presented, requested, now); err != nil {
		s.rememberSuperseded(err, network, site, presented, now)
		return registerRefusal(err)
	}
	return nil
}

// rememberSuperseded notes a certificate the register found superseded:
// the previous one with the one key it may still ask for, any older one
// with none.
func (s *Server) rememberSuperseded(err error, network, site string, presented *x509.Certificate, now time.Time) {
	var notRetry *notRetryError
	switch {
	case errors.As(err, &notRetry):
		s.superseded.add(network, site, presented, notRetry.newestKey, now)
	case errors.Is(err, ErrSuperseded), errors.Is(err, ErrReleased):
		// A released name's certificates never renew again: a new
		// enrolment issues under a new serial.
		s.superseded.add(network, site, presented, "", now)
	}
}

// registerRefusal answers a refusal of the register.
func registerRefusal(err error) *refusal {
	switch {
	case errors.Is(err, ErrSuperseded), errors.Is(err, ErrNotRetry), errors.Is(err, ErrReleased):
		return refuse(http.StatusForbidden, RefusedSuperseded, "%v", err)
	case errors.Is(err, ErrNameRegistered):
		return refuse(http.StatusConflict, RefusedNameRegistered, "%v", err)
	case errors.Is(err, ErrSameKey):
		return refuse(http.StatusBadRequest, RefusedRequest, "%v", err)
	case errors.Is(err, ErrRenewalRate):
		return refuse(http.StatusTooManyRequests, RefusedRenewalRate, "%v", err)
	default:
		return refuse(http.StatusServiceUnavailable, RefusedIssuerFailed, "the certificate could not be recorded: %v", err)
	}
}

// readRequest reads the request's body, at most maxBodyBytes, within the
// deadline serve set: a caller that sends its body slowly loses its
// request after the deadline, having held no slot.
func readRequest(w http.ResponseWriter, r *http.Request, rc *http.ResponseController) (Request, *refusal) {
	var req Request
	if r.ContentLength > maxBodyBytes {
		return req, refuse(http.StatusRequestEntityTooLarge, RefusedRequest, "the request is over %d bytes", maxBodyBytes)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil || len(body) > maxBodyBytes {
		if isTimeout(err) {
			return req, refuse(http.StatusRequestTimeout, RefusedRequest, "the request's body did not arrive within %s", bodyDeadline)
		}
		return req, refuse(http.StatusBadRequest, RefusedRequest, "the request is not JSON of at most %d bytes", maxBodyBytes)
	}
	// Read whole: the deadline goes, so that the connection's own reads
	// (HTTP/1.1 watches for the caller going away) do not end the request
	// while its answer is prepared.
	_ = rc.SetReadDeadline(time.Time{})
	if json.Unmarshal(body, &req) != nil {
		return req, refuse(http.StatusBadRequest, RefusedRequest, "the request is not JSON of at most %d bytes", maxBodyBytes)
	}
	return req, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// decodeCSR reads a certificate request and checks its key is of a kind
// and size accepted; its self-signature (the requester holds the key it
// asks a certificate for) is checked by the caller, after the cheaper
// checks that need the key.
func decodeCSR(data string) (*x509.CertificateRequest, error) {
	b, _ := pem.Decode([]byte(data))
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("csr is not a PEM CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the certificate request does not parse: %w", err)
	}
	// The key's kind and size before the signature made with it: a
	// signature check with an unbounded RSA key costs a tenth of a second.
	if err := keypolicy.CheckPublicKey(csr.PublicKey); err != nil {
		return nil, fmt.Errorf("the certificate request's key: %w", err)
	}
	return csr, nil
}
