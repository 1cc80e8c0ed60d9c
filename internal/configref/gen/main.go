// Command gen writes docs/configuration.md from the code (package
// configref). Run it with go generate ./internal/configref.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/stacksaga-go/stacksaga/internal/configref"
)

func main() {
	root := flag.String("root", "../..", "the module's root")
	out := flag.String("o", "../../docs/configuration.md", "the file to write")
	flag.Parse()
	if err := configref.WriteFile(*root, *out); err != nil {
		fmt.Fprintln(os.Stderr, "configref:", err)
		os.Exit(1)
	}
}
