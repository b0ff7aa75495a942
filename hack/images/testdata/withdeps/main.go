// Command withdeps is a binary built from a module dependency, for the
// test that the SBOM lists the modules a binary is built from (a test
// binary's own build information lists none).
package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

func main() { fmt.Println(unix.Getpid()) }
