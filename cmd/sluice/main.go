// Command sluice is the Sluice Git hosting server and its tools.
package main

import (
	"os"

	"github.com/sluice-scm/sluice/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
