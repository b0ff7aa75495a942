package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/charts/gridsync-agent/files/crds"
	"github.com/gridsync/gridsync/controller"
	"github.com/gridsync/gridsync/controller/praxisconfig"
	"github.com/gridsync/gridsync/internal/cli/convert"
)

// renderCommand is the offline subcommand.
const renderCommand = "render-praxis-config"

// fileList is a repeatable -f flag.
type fileList []string

func (f *fileList) String() string     { return strings.Join(*f, ",") }
func (f *fileList) Set(v string) error { *f = append(*f, v); return nil }

// renderPraxisConfig prints the Praxis config the agent would generate
// for the gateways of a GridNetwork read from manifest files, with the
// InferenceProviders of those files: a change reviewed before it is
// applied. It reads no cluster. Exit status 1 when a gateway's config
// fails closed (its reason is printed), 2 for bad arguments or manifests.
func renderPraxisConfig(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(binary+" "+renderCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var files fileList
	fs.Var(&files, "f", "a manifest file (YAML or JSON, several documents allowed; - for stdin) with the GridNetwork and its InferenceProviders; repeatable")
	network := fs.String("network", "", "the GridNetwork to render, when the files hold several")
	gateway := fs.String("gateway", "", "render only this gateway, as <namespace>/<name> or <name>")
	requirements := fs.Bool("requirements", false, "print each gateway's mount-requirements document after its config")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s %s -f manifests.yaml [-f providers.yaml] [--network name] [--gateway ns/name] [--requirements]\n\n", binary, renderCommand)
		fmt.Fprint(stderr, "Prints the praxis.yaml the agent generates for each gateway whose praxisConfig.generate is true,\n"+
			"as it would with every provider Available, every Secret a provider names present, and no remote site.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(files) == 0 || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	networks, providers, err := readManifests(files)
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, renderCommand, err)
		return 2
	}
	var chosen *v1alpha1.GridNetwork
	for i := range networks {
		if *network == "" || networks[i].Name == *network {
			if chosen != nil {
				fmt.Fprintf(stderr, "%s %s: the files hold several GridNetworks: choose one with --network\n", binary, renderCommand)
				return 2
			}
			chosen = &networks[i]
		}
	}
	if chosen == nil {
		fmt.Fprintf(stderr, "%s %s: no GridNetwork %q in the files\n", binary, renderCommand, *network)
		return 2
	}

	status, printed := 0, 0
	for _, c := range controller.RenderPraxisConfigs(chosen, providers) {
		if *gateway != "" && *gateway != c.Gateway && *gateway != c.Namespace+"/"+c.Gateway {
			continue
		}
		printed++
		if c.Err != nil {
			reason := praxisconfig.ReasonPraxisConfigRenderFailed
			var e *praxisconfig.Error
			if errors.As(c.Err, &e) {
				reason = e.Reason
			}
			fmt.Fprintf(stderr, "gateway %s/%s: %s: %s\n", c.Namespace, c.Gateway, reason, strings.TrimPrefix(c.Err.Error(), reason+": "))
			status = 1
			continue
		}
		fmt.Fprintf(stdout, "# ConfigMap %s/%s, key %s\n", c.Namespace, c.ConfigMapName, praxisconfig.DataKey)
		_, _ = stdout.Write(c.Result.YAML)
		for _, w := range c.Result.Withdrawn {
			fmt.Fprintf(stderr, "gateway %s/%s: withdrew cluster %s (%s): %s\n", c.Namespace, c.Gateway, w.Cluster, strings.Join(w.Models, ", "), w.Why)
		}
		if c.Result.HoldCredentials {
			fmt.Fprintf(stderr, "gateway %s/%s: %s: revisions carrying credentials are held until supportsProjectedCredentials is true\n",
				c.Namespace, c.Gateway, praxisconfig.ReasonProjectedCredentialsUnsupported)
		}
		if *requirements {
			fmt.Fprintf(stdout, "---\n# ConfigMap %s/%s, key %s\n%s\n", c.Namespace, praxisconfig.RequirementsConfigMapName(c.ConfigMapName),
				praxisconfig.RequirementsKey, c.Requirements)
		}
		fmt.Fprintln(stdout, "---")
	}
	if printed == 0 {
		fmt.Fprintf(stderr, "%s %s: GridNetwork %s has no gateway with praxisConfig.generate true%s\n", binary, renderCommand, chosen.Name,
			map[bool]string{true: " named " + *gateway, false: ""}[*gateway != ""])
		return 2
	}
	return status
}

// readManifests reads the GridNetworks and InferenceProviders of the
// files, refusing fields the API does not have (as kubectl's strict
// validation does); other kinds are skipped.
func readManifests(files []string) ([]v1alpha1.GridNetwork, []v1alpha1.InferenceProvider, error) {
	scheme, err := controller.Scheme()
	if err != nil {
		return nil, nil, err
	}
	decoder := serializer.NewCodecFactory(scheme).UniversalDeserializer()
	// The Grid types fold upstream's earlier field names as they decode,
	// so unknown fields are found against the CRDs' own schemas.
	schemas, err := convert.LoadSchemas(crds.Manifests)
	if err != nil {
		return nil, nil, err
	}
	var networks []v1alpha1.GridNetwork
	var providers []v1alpha1.InferenceProvider
	for _, name := range files {
		data, err := readFile(name)
		if err != nil {
			return nil, nil, err
		}
		docs := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for i := 1; ; i++ {
			var raw map[string]any
			if err := docs.Decode(&raw); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, nil, fmt.Errorf("%s, document %d: %w", name, i, err)
			}
			if raw == nil || raw["apiVersion"] != v1alpha1.GroupVersion.String() {
				continue
			}
			if extra := schemas.Unknown(raw); len(extra) > 0 {
				return nil, nil, fmt.Errorf("%s, document %d: unknown field %s", name, i, strings.Join(extra, ", "))
			}
			doc, err := sigsyaml.Marshal(raw)
			if err != nil {
				return nil, nil, fmt.Errorf("%s, document %d: %w", name, i, err)
			}
			obj, _, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				return nil, nil, fmt.Errorf("%s, document %d: %w", name, i, err)
			}
			switch o := obj.(type) {
			case *v1alpha1.GridNetwork:
				networks = append(networks, *o)
			case *v1alpha1.InferenceProvider:
				providers = append(providers, *o)
			}
		}
	}
	return networks, providers, nil
}

func readFile(name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(os.Stdin)
	}
	return os.ReadFile(name)
}
