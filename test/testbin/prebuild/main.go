// Command prebuild builds the binaries the tests run into the shared
// directory of package testbin, so that `make test` builds them beside the
// pinned tools and the linter rather than inside the first test package
// that needs them.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gridsync/gridsync/test/testbin"
)

func main() {
	start := time.Now()
	dir, err := testbin.Dir(context.Background(), testbin.All()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prebuild:", err)
		os.Exit(1)
	}
	fmt.Printf("testbin: the binaries for the tests are in %s (%s)\n", dir, time.Since(start).Round(time.Second))
}
