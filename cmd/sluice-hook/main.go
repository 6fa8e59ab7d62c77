// Command sluice-hook is the program git runs as Sluice's hooks.
//
// Sluice's git home holds one symlink per hook (pre-receive,
// reference-transaction) to this binary, so the hook's name is the name it
// was started as; `sluice-hook NAME ARGS…` works too. It forwards the call
// to the node over a unix socket (internal/hookclient) and does nothing
// else, which is why it is a separate, tiny program: see hookclient's
// package doc. Without it next to the sluice binary, the node falls back
// to running `sluice hook NAME`, the same code in the big binary.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluice-scm/sluice/internal/hookclient"
)

func main() {
	name, args := filepath.Base(os.Args[0]), os.Args[1:]
	if name == "sluice-hook" {
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, "usage: sluice-hook HOOK ARGS… (git runs it through a symlink named after the hook)")
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}
	os.Exit(hookclient.Run(name, args, os.Stdin, os.Stdout, os.Stderr, os.Environ()))
}
