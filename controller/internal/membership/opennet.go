// Networks without a grid CA: what they are (the RecordsSigned
// condition), this site's key for their records (a Secret in the agent's
// namespace, created when missing), the keys the other sites are held to
// (kept in the network's status, given back to membership at start), and
// their reset by the network's operator (an annotation).

package membership

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/controller/internal/base"
	"github.com/gridsync/gridsync/gossip/record"
	"github.com/gridsync/gridsync/gossip/sites"
	"github.com/gridsync/gridsync/shared/envelope"
)

// ConditionRecordsSigned says how the network's records are
// authenticated: True with a grid CA (each record signed with a site
// certificate of it), False without (NetworkUnsigned).
const ConditionRecordsSigned = "RecordsSigned"

// Reasons of the RecordsSigned condition.
const (
	ReasonRecordsSigned   = "RecordsSigned"
	ReasonNetworkUnsigned = "NetworkUnsigned"
)

// ResetSiteKeyAnnotation, on a network without a grid CA, names the
// remote sites (comma-separated) whose keys this site forgets.
const ResetSiteKeyAnnotation = v1alpha1.ResetSiteKeyAnnotation

// recordKeyData is the data key of the record key Secret: the Ed25519
// seed, 32 bytes.
const recordKeyData = "ed25519.seed"

// recordKey is this site's key for the records of open networks, the
// same in all of them: read from its Secret, or made and written there
// when the Secret does not exist, then kept for the process's life.
type recordKey struct {
	mu   sync.Mutex
	key  ed25519.PrivateKey
	said string // the last failure logged
}

// recordKey loads this site's record key (once it has, it is kept).
func (r *Member) recordKey(ctx context.Context) (ed25519.PrivateKey, error) {
	k := &r.openKey
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.key != nil {
		return k.key, nil
	}
	key, created, err := r.loadRecordKey(ctx)
	if err != nil {
		if k.said != err.Error() {
			k.said = err.Error()
			r.Opts.Logger.Error("record_key_failed", "secret", r.Opts.RecordKeySecret.String(), "error", err.Error())
		}
		return nil, err
	}
	k.key, k.said = key, ""
	r.Opts.Logger.Info("record_key_loaded", "secret", r.Opts.RecordKeySecret.String(), "created", created,
		"fingerprint", record.KeyFingerprint(key.Public().(ed25519.PublicKey)))
	return key, nil
}

func (r *Member) loadRecordKey(ctx context.Context) (key ed25519.PrivateKey, created bool, err error) {
	ref := r.Opts.RecordKeySecret
	if ref.Namespace == "" {
		_, key, err := ed25519.GenerateKey(rand.Reader)
		r.Opts.Logger.Warn("record_key_in_memory", "why", "no namespace for the record key Secret: the key lasts as long as the process, and the sites that hold this site to it refuse its records after a restart")
		return key, true, err
	}
	at := fmt.Sprintf("the record key Secret %s", ref)
	var s corev1.Secret
	switch err := r.API.Get(ctx, ref, &s); {
	case err == nil:
		seed := s.Data[recordKeyData]
		if len(seed) != ed25519.SeedSize {
			return nil, false, fmt.Errorf("%s: %s holds %d bytes, not an Ed25519 seed of %d; it is left as it is", at, recordKeyData, len(seed), ed25519.SeedSize)
		}
		return ed25519.NewKeyFromSeed(seed), false, nil
	case !apierrors.IsNotFound(err):
		return nil, false, fmt.Errorf("%s: %s", at, base.APIFailure(err, "get", "Secret"))
	}
	seed := make([]byte, ed25519.SeedSize)
	if _, err := rand.Read(seed); err != nil {
		return nil, false, err
	}
	apply := corev1ac.Secret(ref.Name, ref.Namespace).
		WithLabels(map[string]string{envelope.LabelManagedBy: r.Opts.Producer}).
		WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{recordKeyData: seed})
	if err := r.Client.Apply(ctx, apply, client.FieldOwner(r.Opts.Producer)); err != nil {
		return nil, false, fmt.Errorf("%s does not exist and could not be created: %s", at, base.APIFailure(err, "create", "Secret"))
	}
	return ed25519.NewKeyFromSeed(seed), true, nil
}

// openIdentity is an open network's identity: this site's record key,
// and the keys the other sites were held to (the network's status).
// version changes with the key; note says why there is none.
func (r *Member) openIdentity(ctx context.Context, network *v1alpha1.GridNetwork) (id sites.Identity, version, note string) {
	id = sites.Identity{Open: true, SiteKeys: siteKeysOf(network.Status.SiteKeys)}
	key, err := r.recordKey(ctx)
	if err != nil {
		return id, "open", "this site's record key did not load, so its records of the network go unsigned (the sites that hold it to its key refuse them): " + err.Error()
	}
	id.RecordKey = key
	return id, "open/" + record.KeyFingerprint(key.Public().(ed25519.PublicKey)), ""
}

func siteKeysOf(in []v1alpha1.SiteKeyBinding) []sites.SiteKey {
	out := make([]sites.SiteKey, 0, len(in))
	for _, b := range in {
		out = append(out, sites.SiteKey{Site: b.Site, Fingerprint: b.Fingerprint, Since: b.Since.Time})
	}
	return out
}

func siteKeysStatus(in []sites.SiteKey) []v1alpha1.SiteKeyBinding {
	if len(in) == 0 {
		return nil
	}
	out := make([]v1alpha1.SiteKeyBinding, 0, len(in))
	for _, k := range in {
		out = append(out, v1alpha1.SiteKeyBinding{Site: k.Site, Fingerprint: k.Fingerprint, Since: metav1.NewTime(k.Since.UTC().Truncate(1e9))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Site < out[j].Site })
	return out
}

// resetRequest is the network's reset annotation: the sites it names, as
// written.
type resetRequest struct {
	value string
	sites []string
}

// resetRequested reads the reset annotation; entries that are not a site
// name are logged and left out.
func (r *Member) resetRequested(network *v1alpha1.GridNetwork) resetRequest {
	value := network.Annotations[ResetSiteKeyAnnotation]
	req := resetRequest{value: value}
	for _, s := range strings.Split(value, ",") {
		s = strings.TrimSpace(s)
		switch {
		case s == "":
		case len(validation.IsDNS1123Label(s)) > 0:
			r.Opts.Logger.Warn("site_key_reset_refused", "network", network.Name, "annotation", ResetSiteKeyAnnotation, "entry", record.TruncateForLog(s), "why", "not a site name")
		default:
			req.sites = append(req.sites, s)
		}
	}
	return req
}

// resetSiteKeys applies the reset annotation to membership, once per
// value (until the annotation is removed): a reset repeated after the
// site was bound again would drop it again.
func (r *Member) resetSiteKeys(network *v1alpha1.GridNetwork, req resetRequest, g *given) {
	if req.value == "" {
		// Read as gone: the value applied last may be asked for again.
		g.resetDone = ""
		return
	}
	if g.resetDone == req.value {
		// Applied, its removal perhaps not seen yet by the cache.
		return
	}
	g.resetDone = req.value
	if !base.OpenNetwork(network) {
		r.Opts.Logger.Warn("site_key_reset_refused", "network", network.Name, "annotation", ResetSiteKeyAnnotation,
			"why", "the network has a grid CA: its records are held to certificates of it, not to keys")
		return
	}
	for _, site := range req.sites {
		was := r.Opts.Membership.ResetSiteKey(network.Name, site)
		r.Opts.Logger.Info("site_key_reset", "network", network.Name, "site", site, "was_bound", was)
	}
}

// ClearReset removes the reset annotation once it is applied, unless it
// changed since it was read (the next reconcile applies the new value).
// The value stays marked applied until a reconcile reads the annotation
// gone: a cache that still shows it does not apply it twice.
func (r *Member) ClearReset(ctx context.Context, network *v1alpha1.GridNetwork, value string) {
	path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(ResetSiteKeyAnnotation, "~", "~0"), "/", "~1")
	patch, _ := json.Marshal([]map[string]any{{"op": "test", "path": path, "value": value}, {"op": "remove", "path": path}})
	n := &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: network.Name}}
	if err := r.Client.Patch(ctx, n, client.RawPatch(types.JSONPatchType, patch)); err != nil {
		r.Opts.Logger.Debug("site_key_reset_annotation_kept", "network", network.Name, "error", err.Error())
	}
}

// setOpenNetwork sets the RecordsSigned condition and the keys the remote
// sites are held to: the runtime's once it holds the network's (it was
// given those of the status at start), else those of the status less the
// sites reset; none in a network with a grid CA.
func setOpenNetwork(network *v1alpha1.GridNetwork, next *v1alpha1.GridNetworkStatus, swim Outcome) {
	open := base.OpenNetwork(network)
	switch {
	case !open:
		next.SiteKeys = nil
	case swim.View.OpenKeys:
		next.SiteKeys = siteKeysStatus(swim.View.SiteKeys)
	case len(swim.Resets) > 0:
		kept := next.SiteKeys[:0:0]
		for _, b := range next.SiteKeys {
			if !slices.Contains(swim.Resets, b.Site) {
				kept = append(kept, b)
			}
		}
		next.SiteKeys = kept
	}
	c := metav1.Condition{Type: ConditionRecordsSigned, Status: metav1.ConditionTrue, Reason: ReasonRecordsSigned,
		Message: "records are signed with site certificates of the grid CA and checked at every site", ObservedGeneration: network.Generation}
	if open {
		c.Status, c.Reason = metav1.ConditionFalse, ReasonNetworkUnsigned
		c.Message = fmt.Sprintf("the network declares no grid CA (spec.tls.caSecretRef, caConfigMapRef): its records carry no certificate, "+
			"the SWIM key alone authenticates them, and no remote site can become routable; each remote site is held to the first key "+
			"that signed its records (%d held; annotate %s=<site> to reset one)", len(next.SiteKeys), ResetSiteKeyAnnotation)
	}
	meta.SetStatusCondition(&next.Conditions, c)
}
