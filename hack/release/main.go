// Command release assembles what a gridsync release ships, and keeps the
// kustomize base and its flavours current.
//
//	release kustomize [-check] -values FILE -overlays DIR -kustomize BIN DIR
//	    writes the kustomize base of the agent, generated from the agent
//	    chart with the values in FILE, into DIR (with -check: fails when DIR
//	    is not what the chart renders now, or when an overlay below
//	    -overlays, built with kustomize BIN, is not what the chart renders
//	    with FILE and the overlay's values.yaml)
//	release assemble -images DIR -kustomize DIR -out DIR -version V
//	    packages the two charts with the images' digests filled in, every
//	    file in the packages stamped with $SOURCE_DATE_EPOCH (the same
//	    commit, the same bytes), copies the CRDs and the kustomize folder
//	    (the base and its flavours), and writes SHA256SUMS of it all
//	release publish -release DIR (-key FILE | -unsigned) [-registry HOST[:PORT]] [-ca FILE] [-insecure] [-record FILE]
//	    pushes the release in DIR to its registry (or HOST[:PORT]): each
//	    image index by digest and tag with its SBOM and provenance as
//	    referrers, and the charts as OCI artifacts (see package publish);
//	    with -key signs each image index and chart as cosign does and
//	    attests each image's provenance (package sign), without it refuses
//	    unless -unsigned; prints each reference with its digest and, with
//	    -record, writes them as JSON
//	release verify -key FILE (-record FILE | REF...) [-registry HOST[:PORT]] [-ca FILE] [-insecure]
//	    checks, with the public key alone (no transparency log, no other
//	    network than the registry), every image and chart of the record,
//	    or the references: that the tag names the digest published, the
//	    signature over cosign's payload naming that digest and, for an
//	    image, the DSSE signature of its provenance and the statement's
//	    subject; as cosign verify --key and cosign verify-attestation
//	    --key do; everything read from the registry bounded in size
//
// Helm is the pinned one the Makefile names ($GRIDSYNC_HELM).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"go.yaml.in/yaml/v3"

	"github.com/gridsync/gridsync/hack/release/kube"
)

// The kustomize base renders the agent chart as release gridsync in
// namespace gridsync-system, for the pinned API server's Kubernetes
// version (the chart's Capabilities checks need one).
const (
	baseRelease   = "gridsync"
	baseNamespace = "gridsync-system"
	kubeVersion   = kube.Version
	agentChart    = "charts/gridsync-agent"
	gatewayChart  = "charts/praxis-gateway"
	agentImage    = "ghcr.io/gridsync/gridsync-agent"
	crdDir        = "charts/gridsync-agent/files/crds"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "kustomize":
		err = kustomizeCommand(os.Args[2:])
	case "assemble":
		err = assembleCommand(os.Args[2:])
	case "publish":
		err = publishCommand(os.Args[2:])
	case "verify":
		err = verifyCommand(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: release kustomize [-check -overlays DIR -kustomize BIN] -values FILE DIR | release assemble -images DIR -kustomize DIR -out DIR -version V | release publish -release DIR (-key FILE | -unsigned) [-registry HOST[:PORT]] [-ca FILE] [-insecure] [-record FILE] | release verify -key FILE (-record FILE | REF...) [-registry HOST[:PORT]] [-ca FILE] [-insecure]")
	os.Exit(2)
}

func helm(args ...string) ([]byte, error) {
	bin := os.Getenv("GRIDSYNC_HELM")
	if bin == "" {
		return nil, errors.New("GRIDSYNC_HELM names no helm: run it from make")
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(context.Background(), bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

func kustomizeCommand(args []string) error {
	fs := flag.NewFlagSet("kustomize", flag.ExitOnError)
	check := fs.Bool("check", false, "fail when the folder or an overlay is not current")
	values := fs.String("values", "", "the chart values the base is rendered with")
	overlays := fs.String("overlays", "", "with -check: the folder of the base's overlays, each with the values.yaml of its delta")
	kustomizeBin := fs.String("kustomize", "", "with -check: the pinned kustomize that builds the overlays")
	_ = fs.Parse(args)
	if fs.NArg() != 1 || *values == "" {
		usage()
	}
	files, err := kustomizeBase(*values)
	if err != nil {
		return err
	}
	dir := fs.Arg(0)
	if *check {
		if *overlays == "" || *kustomizeBin == "" {
			usage()
		}
		if err := checkBase(dir, files); err != nil {
			return err
		}
		return checkOverlays(*kustomizeBin, *values, *overlays)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return writeFiles(dir, files)
}

// checkBase fails when dir is not files.
func checkBase(dir string, files map[string][]byte) error {
	var stale []string
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			stale = append(stale, name)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if _, ok := files[e.Name()]; !ok {
			stale = append(stale, e.Name()+" (not generated)")
		}
	}
	if len(stale) > 0 {
		sort.Strings(stale)
		return fmt.Errorf("the kustomize base in %s is not what the agent chart renders (%s): run make kustomize", dir, strings.Join(stale, ", "))
	}
	return nil
}

// checkOverlays builds each overlay below dir with kustomize and fails
// when its objects are not the ones the agent chart renders with the
// base's values and the overlay's values.yaml (its delta): a flavour may
// not drift from the chart it stands for.
func checkOverlays(kustomizeBin, baseValues, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		overlay := filepath.Join(dir, e.Name())
		var stderr bytes.Buffer
		cmd := exec.CommandContext(context.Background(), kustomizeBin, "build", overlay)
		cmd.Stderr = &stderr
		built, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("kustomize build %s: %w\n%s", overlay, err, stderr.String())
		}
		rendered, err := renderAgent(baseValues, filepath.Join(overlay, "values.yaml"))
		if err != nil {
			return err
		}
		want, err := objectsByName(rendered)
		if err != nil {
			return fmt.Errorf("the chart's render for %s: %w", overlay, err)
		}
		got, err := objectsByName(built)
		if err != nil {
			return fmt.Errorf("kustomize build %s: %w", overlay, err)
		}
		var drift []string
		for name, w := range want {
			if g, ok := got[name]; !ok {
				drift = append(drift, name+" (missing)")
			} else if !reflect.DeepEqual(g, w) {
				drift = append(drift, name)
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok {
				drift = append(drift, name+" (not in the chart's render)")
			}
		}
		if len(drift) > 0 {
			sort.Strings(drift)
			return fmt.Errorf("the overlay %s builds to other objects than the agent chart renders with its values.yaml: %s", overlay, strings.Join(drift, ", "))
		}
	}
	return nil
}

// objectsByName decodes a stream of objects, Helm's labels left out, by
// kind/namespace/name.
func objectsByName(stream []byte) (map[string]any, error) {
	out := map[string]any{}
	dec := yaml.NewDecoder(bytes.NewReader(stream))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		dropHelmLabels(&doc)
		var obj map[string]any
		if err := doc.Decode(&obj); err != nil {
			return nil, err
		}
		if obj == nil {
			continue
		}
		sortVolumes(obj)
		meta, _ := obj["metadata"].(map[string]any)
		out[fmt.Sprintf("%v/%v/%v", obj["kind"], meta["namespace"], meta["name"])] = obj
	}
}

// sortVolumes orders every volumes list by name: a kustomize patch of one
// volume moves it first, and a pod's volumes have no order.
func sortVolumes(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			if list, ok := c.([]any); ok && k == "volumes" {
				sort.SliceStable(list, func(i, j int) bool {
					a, _ := list[i].(map[string]any)
					b, _ := list[j].(map[string]any)
					return fmt.Sprint(a["name"]) < fmt.Sprint(b["name"])
				})
			}
			sortVolumes(c)
		}
	case []any:
		for _, c := range v {
			sortVolumes(c)
		}
	}
}

// renderAgent renders the agent chart as the base's release with the
// values files, later ones over earlier ones.
func renderAgent(valuesFiles ...string) ([]byte, error) {
	args := []string{"template", baseRelease, agentChart, "--namespace", baseNamespace, "--kube-version", kubeVersion, "--skip-tests"}
	for _, f := range valuesFiles {
		args = append(args, "--values", f)
	}
	return helm(args...)
}

// kustomizeBase renders the agent chart with the values file and splits
// it by kind into the base's files, with a kustomization.yaml that lists
// them. Helm's own labels are left out: kustomize, not Helm, manages
// these.
func kustomizeBase(values string) (map[string][]byte, error) {
	out, err := renderAgent(values)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		var obj struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
		}
		if err := doc.Decode(&obj); err != nil || obj.Kind == "" {
			continue
		}
		dropHelmLabels(&doc)
		var b bytes.Buffer
		enc := yaml.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(&doc); err != nil {
			return nil, err
		}
		name := fileFor(obj.Kind)
		if len(files[name]) > 0 {
			files[name] = append(files[name], []byte("---\n")...)
		}
		files[name] = append(files[name], b.Bytes()...)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var k bytes.Buffer
	fmt.Fprintf(&k, "# The gridsync agent's platform base, generated by `make kustomize` from the\n# agent chart with %s (release %s): do not edit; change\n# the chart or those values. No Namespace: set yours with `namespace:` in\n# your kustomization (the objects say %s until then), and the image\n# with `images:` (name %s).\n", filepath.ToSlash(values), baseRelease, baseNamespace, agentImage)
	fmt.Fprintf(&k, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n")
	for _, n := range names {
		fmt.Fprintf(&k, "  - %s\n", n)
	}
	files["kustomization.yaml"] = k.Bytes()
	return files, nil
}

// fileFor groups kinds into the base's files.
func fileFor(kind string) string {
	switch kind {
	case "CustomResourceDefinition":
		return "crds.yaml"
	case "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
		return "rbac.yaml"
	case "Service":
		return "services.yaml"
	default:
		return strings.ToLower(kind) + ".yaml"
	}
}

// dropHelmLabels removes helm.sh/chart and app.kubernetes.io/managed-by
// from every labels mapping of the document (the object's and its pod
// template's).
func dropHelmLabels(n *yaml.Node) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "labels" && n.Content[i+1].Kind == yaml.MappingNode {
				m := n.Content[i+1]
				var kept []*yaml.Node
				for j := 0; j+1 < len(m.Content); j += 2 {
					if k := m.Content[j].Value; k == "helm.sh/chart" || k == "app.kubernetes.io/managed-by" {
						continue
					}
					kept = append(kept, m.Content[j], m.Content[j+1])
				}
				m.Content = kept
			}
		}
	}
	for _, c := range n.Content {
		dropHelmLabels(c)
	}
}

func writeFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func assembleCommand(args []string) error {
	fs := flag.NewFlagSet("assemble", flag.ExitOnError)
	imagesDir := fs.String("images", "", "the folder `make images` wrote")
	kustomize := fs.String("kustomize", "", "the kustomize folder: the base and its overlays")
	out := fs.String("out", "", "the release folder")
	version := fs.String("version", "", "the release's version (the charts' appVersion)")
	_ = fs.Parse(args)
	if *imagesDir == "" || *kustomize == "" || *out == "" || *version == "" {
		usage()
	}
	agent, err := indexDigest(filepath.Join(*imagesDir, "gridsync-agent"))
	if err != nil {
		return err
	}
	sidecar, err := indexDigest(filepath.Join(*imagesDir, "gridsync-sidecar"))
	if err != nil {
		return err
	}
	epoch, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	charts := filepath.Join(*out, "charts")
	if err := packageChart(agentChart, charts, *version, epoch, map[string]string{"image.digest": agent}); err != nil {
		return err
	}
	if err := packageChart(gatewayChart, charts, *version, epoch, map[string]string{"overlay.sidecar.image.digest": sidecar}); err != nil {
		return err
	}
	if err := copyDir(crdDir, filepath.Join(*out, "crds"), ".yaml"); err != nil {
		return err
	}
	if err := copyDir(*kustomize, filepath.Join(*out, "kustomize"), ".yaml"); err != nil {
		return err
	}
	return writeSums(*out)
}

// indexDigest is the digest of the image index a layout names.
func indexDigest(dir string) (string, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return "", fmt.Errorf("%s: %w (run make images first)", dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return "", err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return "", err
	}
	for _, d := range m.Manifests {
		if d.MediaType.IsIndex() {
			return d.Digest.String(), nil
		}
	}
	return "", fmt.Errorf("%s holds no image index", dir)
}

// packageChart copies the chart, sets the values at the dotted keys in its
// values.yaml (comments kept) and packages it into out, every file of the
// package stamped with epoch: the same chart packages to the same bytes.
func packageChart(chart, out, version string, epoch time.Time, set map[string]string) error {
	tmp, err := os.MkdirTemp("", "gridsync-chart-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, filepath.Base(chart))
	if err := copyDir(chart, dir, ""); err != nil {
		return err
	}
	valuesFile := filepath.Join(dir, "values.yaml")
	data, err := os.ReadFile(valuesFile)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	for key, value := range set {
		n := lookup(doc.Content[0], strings.Split(key, "."))
		if n == nil {
			return fmt.Errorf("%s: no value %s", chart, key)
		}
		n.Value, n.Tag, n.Style = value, "!!str", yaml.DoubleQuotedStyle
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	if err := os.WriteFile(valuesFile, b.Bytes(), 0o644); err != nil {
		return err
	}
	packaged := filepath.Join(tmp, "packaged")
	if _, err := helm("package", dir, "--app-version", version, "--destination", packaged); err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(packaged, "*.tgz"))
	if err != nil {
		return err
	}
	if len(files) != 1 {
		return fmt.Errorf("helm package %s wrote %d packages, not one", chart, len(files))
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	return reproducibleChart(files[0], filepath.Join(out, filepath.Base(files[0])), epoch)
}

func lookup(n *yaml.Node, path []string) *yaml.Node {
	for _, key := range path {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}

// copyDir copies the files below src (those ending in suffix, when set)
// to dst.
func copyDir(src, dst, suffix string) error {
	return filepath.WalkDir(src, func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if e.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if suffix != "" && !strings.HasSuffix(p, suffix) {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
}

// writeSums writes SHA256SUMS of every other file below dir, as
// `sha256sum -c` reads it.
func writeSums(dir string) error {
	var lines []string
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || filepath.Base(p) == "SHA256SUMS" {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h, _, err := v1.SHA256(f)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		lines = append(lines, h.Hex+"  "+filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return err
	}
	// WalkDir goes in lexical order: the lines are sorted by path.
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}
