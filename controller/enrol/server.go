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
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridsync/gridsync/controller/sitetrust"
)

// The issuer's paths, on its signals listener. Enrolment is open to a
// caller without a certificate (it has none yet); renewal needs the
// caller's current site certificate.
const (
	EnrollPath = "/v1/grid/enroll"
	RenewPath  = "/v1/grid/renew"
)

// maxBodyBytes bounds a request: a certificate request is well under it.
const maxBodyBytes = 16 << 10

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
)

// CA is the grid CA of a network, as the issuer holds it.
type CA interface {
	// Authority returns the network's CA when this site issues for it,
	// and the sites whose renewal it refuses; why says otherwise.
	Authority(ctx context.Context, network string) (ca *sitetrust.CA, refuseRenewal []string, why error)
}

// Server answers enrolments and renewals.
type Server struct {
	CAs      CA
	Tokens   *Tokens
	Lifetime time.Duration
	Now      func() time.Time
	Logger   *slog.Logger
	// inflight bounds the requests that reach the API server at once:
	// an anonymous caller must not spend more than a few reads.
	inflight chan struct{}
	results  *prometheus.CounterVec
}

// NewServer returns a server; reg receives
// grid_site_enrollments_total{path,result}.
func NewServer(cas CA, tokens *Tokens, lifetime time.Duration, logger *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	s := &Server{CAs: cas, Tokens: tokens, Lifetime: lifetime, Now: time.Now, Logger: logger, inflight: make(chan struct{}, 4),
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

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	kind := "enroll"
	if r.URL.Path == RenewPath {
		kind = "renew"
	}
	refuse := func(status int, reason, format string, args ...any) {
		s.results.WithLabelValues(kind, reason).Inc()
		msg := fmt.Sprintf(format, args...)
		// A refused enrolment comes from a caller nobody knows yet, as
		// often as it likes: counted, and logged at debug only. A refused
		// renewal is a site of the grid's, worth a warning.
		level := slog.LevelDebug
		if kind == "renew" {
			level = slog.LevelWarn
		}
		s.Logger.Log(r.Context(), level, "site_"+kind+"_refused", "reason", reason, "message", msg)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(Refusal{Reason: reason, Message: msg})
	}
	if r.Method != http.MethodPost {
		refuse(http.StatusMethodNotAllowed, RefusedRequest, "POST only")
		return
	}
	select {
	case s.inflight <- struct{}{}:
		defer func() { <-s.inflight }()
	default:
		refuse(http.StatusTooManyRequests, RefusedBusy, "the issuer is answering other requests; try again")
		return
	}
	var req Request
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil || len(body) > maxBodyBytes || json.Unmarshal(body, &req) != nil {
		refuse(http.StatusBadRequest, RefusedRequest, "the request is not JSON of at most %d bytes", maxBodyBytes)
		return
	}
	csr, err := parseCSR(req.CSR)
	if err != nil {
		refuse(http.StatusBadRequest, RefusedRequest, "%v", err)
		return
	}
	now := s.Now()
	site := req.Site
	if kind == "renew" {
		// The caller's current certificate names the site; the listener
		// verified the handshake, and the network's CA is checked below.
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			refuse(http.StatusUnauthorized, RefusedIdentity, "a renewal presents the site's current certificate")
			return
		}
		site = ""
		if org := r.TLS.PeerCertificates[0].Subject.Organization; len(org) == 1 {
			site = org[0]
		}
	}
	if err := sitetrust.ValidSiteName(site); err != nil {
		refuse(http.StatusBadRequest, RefusedRequest, "%v", err)
		return
	}
	ctx := r.Context()
	// A caller without a certificate is known only by its token: one that
	// is not there is refused before anything else is read.
	if kind == "enroll" {
		if !tokenShape.MatchString(req.Token) {
			refuse(http.StatusForbidden, RefusedToken, "%v", ErrTokenMalformed)
			return
		}
		held, err := s.Tokens.MayHold(ctx, req.Token, now)
		switch {
		case err != nil:
			refuse(http.StatusServiceUnavailable, RefusedIssuerFailed, "the tokens cannot be checked: %v", err)
			return
		case !held:
			refuse(http.StatusForbidden, RefusedToken, "%v", ErrTokenUnknown)
			return
		}
	}
	ca, refused, err := s.CAs.Authority(ctx, req.Network)
	if err != nil {
		refuse(http.StatusForbidden, RefusedNotIssuer, "%v", err)
		return
	}
	if kind == "renew" {
		leaf := r.TLS.PeerCertificates[0]
		roots := x509.NewCertPool()
		roots.AddCert(ca.Cert)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			refuse(http.StatusUnauthorized, RefusedIdentity, "the certificate presented is not a current certificate of network %s's grid CA", req.Network)
			return
		}
		if err := sitetrust.CheckSVID(leaf, site); err != nil {
			refuse(http.StatusUnauthorized, RefusedIdentity, "the certificate presented is not a site certificate: %v", err)
			return
		}
		if slices.Contains(refused, site) {
			refuse(http.StatusForbidden, RefusedRenewal, "the issuer refuses site %s's renewal (spec.tls.siteCertificate.refuseRenewal)", site)
			return
		}
	} else if err := s.Tokens.Consume(ctx, req.Network, site, req.Token, now); err != nil {
		if errors.Is(err, ErrTokenMalformed) || errors.Is(err, ErrTokenUnknown) || errors.Is(err, ErrTokenExpired) || errors.Is(err, ErrTokenOtherSite) {
			refuse(http.StatusForbidden, RefusedToken, "%v", err)
		} else {
			refuse(http.StatusServiceUnavailable, RefusedIssuerFailed, "the token could not be checked: %v", err)
		}
		return
	}
	chain, err := ca.IssueFor(site, csr.PublicKey, now, s.Lifetime)
	if err != nil {
		refuse(http.StatusInternalServerError, RefusedIssuerFailed, "issuing failed: %v", err)
		return
	}
	leaf, _ := sitetrust.ParseCertificates(chain)
	s.results.WithLabelValues(kind, "issued").Inc()
	s.Logger.Info("site_certificate_issued_for", "network", req.Network, "site", site, "path", kind,
		"fingerprint", sitetrust.Fingerprint(leaf[0].Raw), "not_after", leaf[0].NotAfter.UTC().Format(time.RFC3339))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(Response{Chain: string(chain)})
}

// parseCSR reads a certificate request and checks its self-signature: the
// requester holds the key it asks a certificate for.
func parseCSR(data string) (*x509.CertificateRequest, error) {
	b, _ := pem.Decode([]byte(data))
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("csr is not a PEM CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the certificate request does not parse: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, errors.New("the certificate request is not signed by its own key")
	}
	return csr, nil
}
