// Command build writes the project's images as OCI layouts, without a
// container engine (`make images`): for each image a layout folder
// <out>/<name> holding one image index (an image per platform, the OCI
// labels, the SPDX SBOM of its Go modules and its CA bundle, and the SLSA
// provenance attached to the index) and the archive <out>/<name>.tar that
// `ctr images import` loads. Each platform's binaries are read from
// <bin>/<os>-<arch>/.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gridsync/gridsync/hack/images"
)

func main() {
	bin := flag.String("bin", "bin", "the folder whose <os>-<arch> folders hold each platform's binaries")
	out := flag.String("out", "bin/images", "where the layouts and archives are written")
	tag := flag.String("tag", "dev", "the tag every image is named with")
	registry := flag.String("registry", images.Registry, "the registry and folder every image is named under (<registry>/<name>:<tag>)")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "the platforms, comma-separated (linux only: the binaries are static Linux executables)")
	var meta images.Meta
	flag.StringVar(&meta.Version, "version", "", "org.opencontainers.image.version")
	flag.StringVar(&meta.Revision, "revision", "", "org.opencontainers.image.revision")
	flag.StringVar(&meta.Source, "source", "", "org.opencontainers.image.source")
	testOnly := flag.Bool("test-images", false, "also the images only the node tests run (pause, stand-in gateway)")
	flag.Parse()
	bins := map[string]string{}
	for _, p := range strings.Split(*platforms, ",") {
		goos, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || goos != "linux" || arch == "" {
			fail(fmt.Errorf("--platforms: %q is not linux/<arch>", p))
		}
		bins[arch] = filepath.Join(*bin, goos+"-"+arch)
	}
	specs := images.Shipped
	if *testOnly {
		specs = images.All
	}
	for _, s := range specs {
		ref := *registry + "/" + s.Name + ":" + *tag
		digest, err := images.Write(s, bins, *out, ref, meta)
		if err != nil {
			fail(err)
		}
		fmt.Printf("images: %s %s in %s\n", ref, digest, filepath.Join(*out, s.Name))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "images:", err)
	os.Exit(1)
}
