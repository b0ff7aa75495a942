// Package enrol is how a site without the grid CA's key obtains its site
// certificate from the site that holds it: a one-time token authorises
// one certificate request for one site name, and a site renews with its
// current certificate. The issuer builds every subject itself; only the
// request's public key is carried forward, and the enrolling site's
// private key never leaves its cluster.
package enrol

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Token lifetimes.
const (
	DefaultTokenTTL = time.Hour
	MaxTokenTTL     = 7 * 24 * time.Hour
)

// DefaultTokenSecret is the Secret, in the issuer agent's namespace, that
// holds the enrolment tokens: one Secret, so that the agent's access is
// granted by name (get and patch on it alone; no update, no delete).
const DefaultTokenSecret = "grid-enrollment-tokens"

// tokenPrefix marks a gridsync enrolment token, so that one pasted in the
// wrong place is recognised and a malformed one is refused before any
// lookup.
const tokenPrefix = "gst_"

var tokenShape = regexp.MustCompile(`^gst_[A-Za-z0-9_-]{43}$`)

// entry is one token as stored: never the token, only what it allows.
type entry struct {
	Network string    `json:"network"`
	Site    string    `json:"site"`
	Expires time.Time `json:"expires"`
}

// hashOf is the key a token is stored under: its SHA-256, hex.
func hashOf(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Refusals of a token. Each names what was wrong, so that the enrolling
// site's status says what to fix; none says more than the caller sent.
var (
	ErrTokenMalformed = errors.New("the token is not a gridsync enrolment token")
	ErrTokenUnknown   = errors.New("the token is unknown or was used already (each token enrols once)")
	ErrTokenExpired   = errors.New("the token expired")
	ErrTokenOtherSite = errors.New("the token was issued for another site or network")
)

// Tokens keeps the enrolment tokens in one Secret.
type Tokens struct {
	API       client.Client
	Namespace string
	Name      string // DefaultTokenSecret when empty

	// known is the set of token hashes last read (or why it could not be
	// read), and when: a caller without a certificate sending tokens that
	// are not there costs at most one read of the Secret per knownFor,
	// whatever it sends.
	mu       sync.Mutex
	reading  sync.Mutex
	known    map[string]bool
	knownErr error
	knownAt  time.Time
	// reads counts the reads of the Secret to check a token
	// (grid_site_enrollment_token_reads_total).
	reads atomic.Int64
}

// knownFor is how long the set of token hashes read is taken as current
// for a token it does not hold.
const knownFor = 250 * time.Millisecond

// knownReadTimeout bounds the one read of the set that callers wait for.
const knownReadTimeout = 5 * time.Second

// MayHold reports whether token may be a stored token: false for one not
// in the set read less than knownFor ago (then without any read), and an
// error when the Secret cannot be read. A token the operator adds that
// moment is found at the enrolling site's next attempt.
func (t *Tokens) MayHold(ctx context.Context, token string, now time.Time) (bool, error) {
	h := hashOf(token)
	cached := func() (held, fresh bool, err error) {
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.known[h], !t.knownAt.IsZero() && now.Sub(t.knownAt) < knownFor, t.knownErr
	}
	if held, fresh, err := cached(); fresh {
		return held, err
	}
	// One read at a time: callers that find the set stale together wait
	// for the one read rather than each making its own.
	t.reading.Lock()
	defer t.reading.Unlock()
	if held, fresh, err := cached(); fresh {
		return held, err
	}
	var s corev1.Secret
	var err error
	t.reads.Add(1)
	// The read answers every caller waiting for it: it is not ended by
	// the caller that happened to make it going away.
	readCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), knownReadTimeout)
	err = t.API.Get(readCtx, t.key(), &s)
	cancel()
	if apierrors.IsNotFound(err) {
		err = nil // no token at all
	}
	if err != nil {
		err = fmt.Errorf("the token Secret %s: %w", t.key(), err)
	}
	known := make(map[string]bool, len(s.Data))
	for k := range s.Data {
		if !isRegisterKey(k) {
			known[k] = true
		}
	}
	t.mu.Lock()
	t.known, t.knownErr, t.knownAt = known, err, now
	t.mu.Unlock()
	return known[h], err
}

// forget drops the set of hashes read: this process changed the Secret.
func (t *Tokens) forget() {
	t.mu.Lock()
	t.knownAt = time.Time{}
	t.mu.Unlock()
}

func (t *Tokens) key() types.NamespacedName {
	name := t.Name
	if name == "" {
		name = DefaultTokenSecret
	}
	return types.NamespacedName{Namespace: t.Namespace, Name: name}
}

// Add creates a token allowing one certificate request for site in
// network until ttl from now, and returns it: it is shown once and stored
// only hashed. The Secret is created when it does not exist.
func (t *Tokens) Add(ctx context.Context, network, site string, ttl time.Duration, now time.Time) (string, error) {
	if ttl <= 0 || ttl > MaxTokenTTL {
		return "", fmt.Errorf("a token lives between a second and %s, not %s", MaxTokenTTL, ttl)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	token := tokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	value, err := json.Marshal(entry{Network: network, Site: site, Expires: now.Add(ttl).UTC()})
	if err != nil {
		return "", err
	}
	return token, t.update(ctx, func(s *corev1.Secret) error {
		pruneExpired(s, now)
		s.Data[hashOf(token)] = value
		return nil
	}, true)
}

// Consume spends a token for site in network, claiming no name (Claim
// is the enrolment's): it is removed whatever happens next, so it can
// never be used twice (the removal is written with the Secret's resource
// version: of two requests with one token, one wins).
func (t *Tokens) Consume(ctx context.Context, network, site, token string, now time.Time) error {
	return t.spend(ctx, network, site, token, nil, now)
}

// Claim spends a token for the enrolment of site in network under the
// key whose fingerprint is key, and registers the name for that key in
// the same write. A name registered under another key is refused
// (ErrNameRegistered) and the token is not spent: the write that would
// spend it is not made, and of two enrolments racing for one name the
// one written second finds the other's claim. A token that does not
// allow the enrolment (expired, for another site) is spent, as Consume
// spends it.
func (t *Tokens) Claim(ctx context.Context, network, site, token, key string, now time.Time) error {
	return t.spend(ctx, network, site, token, func(data map[string][]byte) error {
		return claimName(data, network, site, key, TokenID(token), now)
	}, now)
}

// spend removes token when it is stored, refusing it when it does not
// allow site in network; claim, when set, is made in the same write for
// a token that does, and when it fails nothing is written.
func (t *Tokens) spend(ctx context.Context, network, site, token string, claim func(map[string][]byte) error, now time.Time) error {
	if !tokenShape.MatchString(token) {
		return ErrTokenMalformed
	}
	h := hashOf(token)
	var refusal error
	err := t.update(ctx, func(s *corev1.Secret) error {
		refusal = nil
		raw, ok := s.Data[h]
		if !ok {
			return ErrTokenUnknown
		}
		var e entry
		switch {
		case json.Unmarshal(raw, &e) != nil:
			refusal = ErrTokenUnknown
		case !now.Before(e.Expires):
			refusal = ErrTokenExpired
		case e.Network != network || e.Site != site:
			refusal = ErrTokenOtherSite
		case claim != nil:
			if err := claim(s.Data); err != nil {
				return err
			}
		}
		delete(s.Data, h)
		pruneExpired(s, now)
		return nil
	}, false)
	if errors.Is(err, errSecretMissing) {
		return ErrTokenUnknown
	}
	if err != nil {
		return err
	}
	return refusal
}

// errSecretMissing: the Secret is not there, and update does not make it.
var errSecretMissing = errors.New("the token Secret does not exist")

// update reads the Secret, applies change and patches what it changed
// on the resource version read, again on a conflict. create makes the Secret
// when it is missing (the command that adds tokens; the agent never
// creates it).
func (t *Tokens) update(ctx context.Context, change func(*corev1.Secret) error, create bool) error {
	key := t.key()
	for range 5 {
		var s corev1.Secret
		err := t.API.Get(ctx, key, &s)
		if apierrors.IsNotFound(err) {
			if !create {
				return errSecretMissing
			}
			s = corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "gridsync", "grid.praxis.fast/enrollment-tokens": "true"}},
				Type: corev1.SecretTypeOpaque, Data: map[string][]byte{}}
			if err := change(&s); err != nil {
				return err
			}
			if err := t.API.Create(ctx, &s); apierrors.IsAlreadyExists(err) {
				continue
			} else if err != nil {
				return err
			}
			t.forget()
			return nil
		}
		if err != nil {
			return fmt.Errorf("the token Secret %s: %w", key, err)
		}
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		read := s.DeepCopy()
		if err := change(&s); err != nil {
			return err
		}
		// A patch that carries the resource version read: the API server
		// refuses it when the Secret changed since, so that of two
		// writers spending one token one wins, with patch, which the
		// agent holds, and no update, which it does not.
		err = t.API.Patch(ctx, &s, client.MergeFromWithOptions(read, client.MergeFromWithOptimisticLock{}))
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("the token Secret %s: %w", key, err)
		}
		t.forget()
		return nil
	}
	return fmt.Errorf("the token Secret %s kept changing while it was written", key)
}

// pruneExpired drops the tokens that can no longer be used (the sites'
// records beside them stay).
func pruneExpired(s *corev1.Secret, now time.Time) {
	for k, raw := range s.Data {
		if isRegisterKey(k) {
			continue
		}
		var e entry
		if json.Unmarshal(raw, &e) == nil && !now.Before(e.Expires) {
			delete(s.Data, k)
		}
	}
}
