// Command build writes the project's images as OCI layouts, without a
// container engine (`make images`): for each image a layout folder
// <out>/<name> and the archive <out>/<name>.tar that `ctr images import`
// loads, from the binaries in --bin.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gridsync/gridsync/test/images"
)

func main() {
	bin := flag.String("bin", "bin", "the folder of the binaries")
	out := flag.String("out", "images", "where the layouts and archives are written")
	tag := flag.String("tag", "dev", "the tag every image is named with")
	testOnly := flag.Bool("test-images", false, "also the images only the node tests run (pause, stand-in gateway)")
	flag.Parse()
	specs := images.Shipped
	if *testOnly {
		specs = images.All
	}
	for _, s := range specs {
		digest, err := images.Write(s, *bin, *out, *tag)
		if err != nil {
			fmt.Fprintln(os.Stderr, "images:", err)
			os.Exit(1)
		}
		fmt.Printf("images: %s %s in %s\n", s.Ref(*tag), digest, filepath.Join(*out, s.Name))
	}
}
