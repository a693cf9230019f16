package command

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// rocksDBVersion returns the linked RocksDB's version; version_cgo.go sets
// it in builds with the engine. Nil means a CGO_ENABLED=0 build.
var rocksDBVersion func() string

func init() {
	Register(&cli.Command{
		Name:   "version",
		Usage:  "print the sfstate version, its VCS revision, Go version and the RocksDB linked (also --version)",
		Action: printVersion,
	})
}

// VersionInfo is what `sfstate version --json` prints.
type VersionInfo struct {
	// Module is the main module's version ("(devel)" for a source build).
	Module   string `json:"module"`
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	// Time is the commit time, RFC 3339.
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
	// RocksDB is the linked library's version, "" without RocksDB support.
	RocksDB string `json:"rocksdb"`
	CGO     bool   `json:"cgo"`
}

// Version collects the build's version information.
func Version() VersionInfo {
	v := VersionInfo{Module: "github.com/sfstate/sfstate", Version: "(devel)", Go: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path != "" {
			v.Module = bi.Main.Path
		}
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			case "CGO_ENABLED":
				v.CGO = s.Value == "1"
			}
		}
	}
	if rocksDBVersion != nil {
		v.RocksDB = rocksDBVersion()
		v.CGO = true
	}
	return v
}

func printVersion(c *cli.Context) error {
	if c.NArg() > 0 {
		return Failf(ExitUsage, "version takes no arguments")
	}
	v := Version()
	w := c.App.Writer
	if GlobalsFrom(c).JSON {
		return writeJSON(w, v)
	}
	fmt.Fprintf(w, "sfstate %s (%s)\n", v.Version, v.Module)
	if v.Revision != "" {
		mod := ""
		if v.Modified {
			mod = " (modified)"
		}
		fmt.Fprintf(w, "revision %s%s, %s\n", v.Revision, mod, v.Time)
	} else {
		fmt.Fprintln(w, "revision unknown (built without VCS information)")
	}
	fmt.Fprintf(w, "%s %s\n", v.Go, v.Platform)
	if v.RocksDB != "" {
		fmt.Fprintf(w, "RocksDB %s\n", v.RocksDB)
	} else {
		fmt.Fprintln(w, "no RocksDB support (built with CGO_ENABLED=0: inspect --deep, migrate, verify's backends and the engine benchmarks are unavailable)")
	}
	return nil
}
