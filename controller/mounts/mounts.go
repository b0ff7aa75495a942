// Package mounts plans a delegated gateway Deployment's generated config
// and Secret mounts: which projections the config's mount requirements
// need, whether the Deployment opted in and mounts the config where the
// gateway reads it, what the agent owns of its pod template, and the one
// server-side apply that switches the config slot, the projections and the
// revision annotations together. It reads a Deployment and returns
// values; it never talks to the API server.
package mounts

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/gridsync/gridsync/controller/praxisconfig"
)

// ConfigMountPath is where the gateway reads praxis.yaml: the selected
// container must mount the generated config there, as a folder.
const ConfigMountPath = "/etc/praxis"

// The Deployment's opt-in: its own annotations, which the praxis-gateway
// chart sets with mountReconciliation.enabled, naming the network and the
// gateway that may change it.
const (
	AnnotationEnabled    = "grid.praxis.fast/mount-reconciliation"
	AnnotationNetwork    = "grid.praxis.fast/mount-reconciliation-network"
	AnnotationGatewayRef = "grid.praxis.fast/mount-reconciliation-gateway-ref"
	// AnnotationNetworkUID binds the opt-in to one GridNetwork object, not
	// only its name: a network deleted and created again under the same
	// name (by anyone who may create GridNetworks) has another UID and is
	// refused. The agent records the UID on its first patch; the chart
	// sets it when the operator gives it (mountReconciliation.networkUID).
	AnnotationNetworkUID = "grid.praxis.fast/mount-reconciliation-network-uid"
)

// The pod template's revision annotations, owned by the agent: a new value
// rolls the pods. Secrets are named by resource version, hashed; their
// values are never read into them.
const (
	AnnotationConfigRevision  = "grid.praxis.fast/config-revision"
	AnnotationSecretsRevision = "grid.praxis.fast/secrets-revision"
	// AnnotationMounts records the volumes the agent owns (comma
	// separated): the only ones it ever prunes.
	AnnotationMounts = "grid.praxis.fast/mounts"
)

// FieldManager is the agent's server-side apply field manager for the
// Deployment: its own, so that the fields it applies are told apart from
// Helm's (and anyone else's) in managedFields, and a later apply that
// leaves one out removes only a field this manager alone owns.
const FieldManager = "gridsync-agent-mounts"

// Phases of a mountReconciliationStatus entry.
const (
	PhaseReconciling       = "MountsReconciling"
	PhaseWaitingForSecret  = "WaitingForSecret"
	PhaseWaitingForRollout = "WaitingForRollout"
	PhaseReady             = "Ready"
	PhaseError             = "Error"
	PhaseDisabled          = "Disabled"
)

// Reasons of a mountReconciliationStatus entry.
const (
	ReasonDeploymentForbidden   = "DeploymentForbidden"
	ReasonDeploymentMissing     = "DeploymentMissing"
	ReasonDeploymentPatchFailed = "DeploymentPatchFailed"
	ReasonNotOptedIn            = "DeploymentNotOptedIn"
	ReasonNetworkRecreated      = "NetworkRecreated"
	ReasonContainerMissing      = "ContainerMissing"
	ReasonConfigNotMounted      = "ConfigNotMounted"
	ReasonInvalidMountPath      = "InvalidMountPath"
	ReasonMountPathConflict     = "MountPathConflict"
	ReasonSecretNamespace       = "SecretOutsideGatewayNamespace"
	ReasonConfigNotRendered     = "ConfigNotRendered"
	ReasonSecretMissing         = "SecretMissing"
	ReasonConfigSwitched        = "ConfigSwitched"
	ReasonMountsPruned          = "MountsPruned"
	ReasonRolloutInProgress     = "RolloutInProgress"
	ReasonScaledToZero          = "ScaledToZero"
	ReasonRolledOut             = "RolledOut"
	ReasonDelegationDisabled    = "DelegationDisabled"
)

// Error is a Deployment or a requirement the agent will not patch for:
// its reason is the status entry's.
type Error struct {
	Reason, Message string
}

func (e *Error) Error() string { return e.Message }

func fail(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:16]
}

// VolumeName is the reserved volume name of the projection at mountPath:
// grid-mount-<first 16 hex of SHA-256(mountPath)>.
func VolumeName(mountPath string) string { return "grid-mount-" + shortHash(mountPath) }

// SlotName is the Grid-managed ConfigMap that alternates with the
// configured one: grid-praxis-config-<first 16 hex of SHA-256(name)>.
func SlotName(configMapName string) string { return "grid-praxis-config-" + shortHash(configMapName) }

// ConfigRevision names a generated config in the pod template.
func ConfigRevision(config []byte) string { return shortHash(string(config)) }

// SecretsRevision names the Secrets' versions (namespace/name to
// resourceVersion) in the pod template: a rotated Secret changes it.
func SecretsRevision(versions map[string]string) string {
	keys := make([]string, 0, len(versions))
	for k := range versions {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, versions[k])
	}
	return shortHash(b.String())
}

// Projection is one folder of Secret files the config reads: one
// projected volume at MountPath with a source per Secret.
type Projection struct {
	MountPath string
	Sources   []Source
	// Optional: an obsolete projection kept while old pods may still
	// need it; a Secret deleted meanwhile must not stop new pods.
	Optional bool
}

// Source is one Secret's keys and the file names they take.
type Source struct {
	Secret string
	Items  []corev1.KeyToPath
}

// Volume is the projection's reserved volume name.
func (p Projection) Volume() string { return VolumeName(p.MountPath) }

// Projections are the folders a config's mount requirements need: each
// file's folder becomes one projected volume, with the keys read there.
// Every Secret must be in the gateway's namespace; a folder must be an
// absolute clean path that neither is nor contains the config folder.
func Projections(namespace string, reqs []praxisconfig.Requirement) ([]Projection, error) {
	byPath := map[string]map[string][]corev1.KeyToPath{}
	for _, r := range reqs {
		if r.Secret.Namespace != namespace {
			return nil, fail(ReasonSecretNamespace, "Secret %s/%s (%s) is not in the gateway's namespace %s: delegated mounts project Secrets of that namespace only",
				r.Secret.Namespace, r.Secret.Name, r.Purpose, namespace)
		}
		for _, it := range r.Items {
			dir, file := path.Split(it.Path)
			dir = strings.TrimSuffix(dir, "/")
			if err := validMountPath(dir); err != nil {
				return nil, fail(ReasonInvalidMountPath, "Secret %s/%s is read at %s: %v", r.Secret.Namespace, r.Secret.Name, it.Path, err)
			}
			if byPath[dir] == nil {
				byPath[dir] = map[string][]corev1.KeyToPath{}
			}
			byPath[dir][r.Secret.Name] = append(byPath[dir][r.Secret.Name], corev1.KeyToPath{Key: it.Key, Path: file})
		}
	}
	out := make([]Projection, 0, len(byPath))
	for dir, secrets := range byPath {
		p := Projection{MountPath: dir}
		for name, items := range secrets {
			slices.SortFunc(items, func(a, b corev1.KeyToPath) int { return cmp.Compare(a.Path, b.Path) })
			items = slices.CompactFunc(items, func(a, b corev1.KeyToPath) bool { return a == b })
			p.Sources = append(p.Sources, Source{Secret: name, Items: items})
		}
		slices.SortFunc(p.Sources, func(a, b Source) int { return cmp.Compare(a.Secret, b.Secret) })
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Projection) int { return cmp.Compare(a.MountPath, b.MountPath) })
	return out, nil
}

// validMountPath refuses a folder the kubelet would refuse or that would
// hide the config: relative, unclean, the root, or the config folder or
// one of its parents.
func validMountPath(dir string) error {
	switch {
	case dir == "" || !path.IsAbs(dir) || path.Clean(dir) != dir:
		return fmt.Errorf("the folder %q is not an absolute clean path", dir)
	case dir == "/":
		return fmt.Errorf("the folder is the root")
	case within(ConfigMountPath, dir):
		return fmt.Errorf("the folder %s would hide the config folder %s", dir, ConfigMountPath)
	case strings.ContainsAny(dir, ":,"):
		return fmt.Errorf("the folder %q has a colon or a comma", dir)
	}
	return nil
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// Target is what the agent reconciles a Deployment to.
type Target struct {
	Network, Gateway string
	// NetworkUID is the network's UID, checked against the Deployment's
	// AnnotationNetworkUID when it has one, and recorded there by Apply.
	NetworkUID string
	Container  string
	// Slots are the configured ConfigMap and the Grid-managed one.
	Slots [2]string
}

// Inactive is the slot the template does not mount.
func (t Target) Inactive(active string) string {
	if active == t.Slots[0] {
		return t.Slots[1]
	}
	return t.Slots[0]
}

// Live is what the agent reads of a Deployment it may patch.
type Live struct {
	// ConfigVolume is the volume mounted at /etc/praxis, ActiveSlot the
	// ConfigMap it projects.
	ConfigVolume, ActiveSlot string
	// ConfigRevision and SecretsRevision are the template's annotations.
	ConfigRevision, SecretsRevision string
	// Projections are the volumes the agent recorded as its own (by
	// name), as the template has them.
	Projections map[string]Projection

	container *corev1.Container
	volumes   map[string]*corev1.Volume
}

// Inspect checks a Deployment before anything is patched: its opt-in
// annotations name this network and gateway, it has the container, and
// the container mounts one of the two config slots (the praxis.yaml key)
// at /etc/praxis as a folder.
func Inspect(d *appsv1.Deployment, t Target) (Live, error) {
	at := fmt.Sprintf("Deployment %s/%s", d.Namespace, d.Name)
	a := d.Annotations
	if a[AnnotationEnabled] != "true" || a[AnnotationNetwork] != t.Network || a[AnnotationGatewayRef] != t.Gateway {
		return Live{}, fail(ReasonNotOptedIn, "%s does not opt in: it needs the annotations %s: \"true\", %s: %q and %s: %q (the praxis-gateway chart's mountReconciliation.enabled, .network and .gatewayRef)",
			at, AnnotationEnabled, AnnotationNetwork, t.Network, AnnotationGatewayRef, t.Gateway)
	}
	if uid := a[AnnotationNetworkUID]; uid != "" && uid != t.NetworkUID {
		return Live{}, fail(ReasonNetworkRecreated, "%s opted in for GridNetwork %s with UID %s; this GridNetwork %s has UID %s: it was deleted and created again "+
			"since the opt-in was granted. If it is the network meant, set the annotation %s to %s (or remove it: the agent records the UID on its next patch)",
			at, t.Network, uid, t.Network, t.NetworkUID, AnnotationNetworkUID, t.NetworkUID)
	}
	spec := &d.Spec.Template.Spec
	live := Live{volumes: map[string]*corev1.Volume{}, Projections: map[string]Projection{}}
	for i := range spec.Volumes {
		live.volumes[spec.Volumes[i].Name] = &spec.Volumes[i]
	}
	for i := range spec.Containers {
		if spec.Containers[i].Name == t.Container {
			live.container = &spec.Containers[i]
		}
	}
	if live.container == nil {
		return Live{}, fail(ReasonContainerMissing, "%s has no container %s", at, t.Container)
	}
	for _, m := range live.container.VolumeMounts {
		if path.Clean(m.MountPath) != ConfigMountPath {
			continue
		}
		v := live.volumes[m.Name]
		switch {
		case m.SubPath != "" || m.SubPathExpr != "":
			return Live{}, fail(ReasonConfigNotMounted, "%s: container %s mounts %s with a subPath; the config must be mounted as a folder", at, t.Container, ConfigMountPath)
		case v == nil || v.ConfigMap == nil || !slices.Contains(t.Slots[:], v.ConfigMap.Name) || !projectsConfig(v.ConfigMap.Items):
			return Live{}, fail(ReasonConfigNotMounted, "%s: container %s must mount ConfigMap %s (key %s) at %s", at, t.Container, t.Slots[0], praxisconfig.DataKey, ConfigMountPath)
		}
		live.ConfigVolume, live.ActiveSlot = m.Name, v.ConfigMap.Name
	}
	if live.ConfigVolume == "" {
		return Live{}, fail(ReasonConfigNotMounted, "%s: container %s mounts nothing at %s; it must mount ConfigMap %s there", at, t.Container, ConfigMountPath, t.Slots[0])
	}
	tmpl := d.Spec.Template.Annotations
	live.ConfigRevision, live.SecretsRevision = tmpl[AnnotationConfigRevision], tmpl[AnnotationSecretsRevision]
	for _, name := range strings.Split(tmpl[AnnotationMounts], ",") {
		v := live.volumes[name]
		if name == "" || v == nil || v.Projected == nil {
			continue
		}
		mount := live.mountOf(name)
		if mount == "" {
			continue
		}
		live.Projections[name] = projectionOf(mount, v.Projected)
	}
	return live, nil
}

// projectsConfig: the volume's items give praxis.yaml its own name (or
// the whole ConfigMap is projected).
func projectsConfig(items []corev1.KeyToPath) bool {
	if len(items) == 0 {
		return true
	}
	for _, it := range items {
		if it.Key == praxisconfig.DataKey && it.Path == praxisconfig.DataKey {
			return true
		}
	}
	return false
}

func (l Live) mountOf(volume string) string {
	for _, m := range l.container.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	return ""
}

// Owned are the names of the volumes the agent owns, sorted.
func (l Live) Owned() []string { return slices.Sorted(maps.Keys(l.Projections)) }

func (l Live) owns(volume string) bool {
	_, ok := l.Projections[volume]
	return ok
}

func projectionOf(mount string, v *corev1.ProjectedVolumeSource) Projection {
	p := Projection{MountPath: mount}
	for _, s := range v.Sources {
		if s.Secret == nil {
			continue
		}
		p.Sources = append(p.Sources, Source{Secret: s.Secret.Name, Items: s.Secret.Items})
		if s.Secret.Optional != nil && *s.Secret.Optional {
			p.Optional = true
		}
	}
	return p
}

// Conflicts refuses projections that would take the place of what the
// agent does not own: a mount of the container at the same folder or
// below it (which the projection would hide), or a volume of the reserved
// name that the agent did not record.
func (l Live) Conflicts(want []Projection) error {
	for _, p := range want {
		if v := l.volumes[p.Volume()]; v != nil && !l.owns(p.Volume()) {
			return fail(ReasonMountPathConflict, "the pod template has a volume %s that Grid did not add: that name is reserved for the projection at %s", p.Volume(), p.MountPath)
		}
		for _, m := range l.container.VolumeMounts {
			if l.owns(m.Name) || m.Name == p.Volume() {
				continue
			}
			if within(path.Clean(m.MountPath), p.MountPath) {
				return fail(ReasonMountPathConflict, "container %s already mounts volume %s at %s, where Grid would mount the Secrets read at %s: move the chart's mount or the GatewayRef's mount path (credentialMountPath, tlsCertMountPath)",
					l.container.Name, m.Name, m.MountPath, p.MountPath)
			}
		}
	}
	return nil
}

// Desired is the template the agent reconciles to.
type Desired struct {
	Slot                            string
	ConfigRevision, SecretsRevision string
	Projections                     []Projection
}

// InSync reports whether the template already carries desired: the
// revisions, the slot, and every projection mounted as wanted.
// activeRevision is the revision of what the active slot holds: a slot
// switched or rewritten by someone else is not in sync.
func (l Live) InSync(want Desired, activeRevision string) bool {
	if l.ConfigRevision != want.ConfigRevision || l.SecretsRevision != want.SecretsRevision || activeRevision != want.ConfigRevision {
		return false
	}
	for _, p := range want.Projections {
		got, ok := l.Projections[p.Volume()]
		if !ok || !equalProjection(got, p) {
			return false
		}
	}
	return true
}

// Obsolete are the owned projections desired no longer has.
func (l Live) Obsolete(want Desired) []Projection {
	keep := map[string]bool{}
	for _, p := range want.Projections {
		keep[p.Volume()] = true
	}
	var out []Projection
	for _, name := range l.Owned() {
		if !keep[name] {
			p := l.Projections[name]
			p.Optional = true
			out = append(out, p)
		}
	}
	return out
}

func equalProjection(a, b Projection) bool {
	return a.MountPath == b.MountPath && a.Optional == b.Optional &&
		slices.EqualFunc(a.Sources, b.Sources, func(x, y Source) bool {
			return x.Secret == y.Secret && slices.EqualFunc(x.Items, y.Items, func(i, j corev1.KeyToPath) bool {
				return i.Key == j.Key && i.Path == j.Path
			})
		})
}
