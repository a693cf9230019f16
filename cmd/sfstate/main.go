// Command sfstate inspects, migrates, rescales and verifies Flink-compatible
// stream state. All logic lives in package command.
package main

import (
	"os"

	"github.com/sfstate/sfstate/cmd/sfstate/command"
)

func main() {
	os.Exit(command.Main(os.Args, os.Stdout, os.Stderr))
}
