package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/gridsync/gridsync/charts/gridsync-agent/files/crds"
	"github.com/gridsync/gridsync/internal/cli/convert"
)

// convertCommand rewrites manifests of upstream's earlier releases.
const convertCommand = "convert"

// convertManifests is `gridsync-agent convert [-f file]...`: it reads
// manifests (stdin without -f) and prints them with the grid.praxis.fast
// API group and the current field names, objects of other groups
// unchanged. A field or kind with no equivalent is named and nothing is
// printed (exit 1): a manifest is converted whole or not at all. Comments
// are not kept.
func convertManifests(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(binary+" "+convertCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var files fileList
	fs.Var(&files, "f", "a manifest file (YAML or JSON, several documents allowed; - for stdin); repeatable; stdin when none")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s %s [-f manifests.yaml]... > converted.yaml\n\n", binary, convertCommand)
		fmt.Fprintf(stderr, "Rewrites Grid manifests of the %s API group and upstream's earlier field names\n"+
			"(gatewayRefs, localSiteName, consumerConfig, enabled, credentialMountBase, swimKeyRef, egress,\n"+
			"routingClusterRef, manual, metricsEndpoint; peerTrust.mode pin) into the current ones.\n\n", convert.EarlierGroup)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	if len(files) == 0 {
		files = fileList{"-"}
	}
	schemas, err := convert.LoadSchemas(crds.Manifests)
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", binary, convertCommand, err)
		return 1
	}
	var out bytes.Buffer
	failed := false
	for _, name := range files {
		data, err := readInput(name, stdin)
		if err != nil {
			fmt.Fprintf(stderr, "%s %s: %s: %v\n", binary, convertCommand, name, err)
			return 1
		}
		// Sized before anything is decoded: the limits bound the memory.
		chunks, err := convert.Documents(data)
		if err != nil {
			fmt.Fprintf(stderr, "%s %s: %s, %v\n", binary, convertCommand, name, err)
			return 1
		}
		i := 0
		for _, chunk := range chunks {
			docs := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(chunk), 4096)
			for {
				var obj map[string]any
				if err := docs.Decode(&obj); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					fmt.Fprintf(stderr, "%s %s: %s, document %d: %v\n", binary, convertCommand, name, i+1, err)
					return 1
				}
				i++
				if len(obj) == 0 {
					continue
				}
				if err := convert.Object(obj, schemas); err != nil {
					fmt.Fprintf(stderr, "%s %s: %s, document %d: %v\n", binary, convertCommand, name, i, err)
					failed = true
					continue
				}
				doc, err := sigsyaml.Marshal(obj)
				if err != nil {
					fmt.Fprintf(stderr, "%s %s: %s, document %d: %v\n", binary, convertCommand, name, i, err)
					return 1
				}
				out.WriteString("---\n")
				out.Write(doc)
			}
		}
	}
	if failed {
		return 1
	}
	_, _ = stdout.Write(out.Bytes())
	return 0
}

// readInput reads an input, at most convert.MaxFileBytes of it.
func readInput(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		return convert.ReadInput(stdin)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return convert.ReadInput(f)
}
