package command

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sfstate/sfstate/s3"
	"github.com/urfave/cli/v2"
)

func init() {
	Register(&cli.Command{
		Name:      "gc",
		Usage:     "remove scratch directories and temporary files an interrupted sfstate run left behind",
		ArgsUsage: "DIR|s3://bucket/prefix",
		Description: `Removes, below DIR, every file or directory whose name starts with
"` + s3.ScratchPrefix + `" (or "." + that prefix: the local store's unfinished
writes) and that nothing changed for --min-age: scratch directories of
verify, migrate and convert, and unfinished writes into a destination.
Nothing else is touched: never an entry without the prefix, never a
directory holding a _metadata file. Under an s3:// prefix it also aborts
the unfinished multipart uploads started before --min-age (a killed
upload's parts, invisible but billed). --dry-run lists what would go.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "dry-run", Aliases: []string{"n"}, Usage: "list what would be removed, remove nothing"},
			&cli.DurationFlag{Name: "min-age", Value: time.Hour, Usage: "only remove entries unchanged for this long (0: any age)"},
			savepointS3EndpointFlag,
		},
		Action: runGC,
	})
}

// isScratchName reports whether a file or directory name carries the
// scratch prefix.
func isScratchName(name string) bool {
	return strings.HasPrefix(strings.TrimPrefix(name, "."), s3.ScratchPrefix)
}

// gcEntry is one leftover found by gc.
type gcEntry struct {
	Path  string    `json:"path"`
	Bytes int64     `json:"bytes"`
	MTime time.Time `json:"modified"`
	// Kept says why an entry with the prefix stays ("" = removed).
	Kept string `json:"kept,omitempty"`
}

func runGC(c *cli.Context) error {
	if c.NArg() != 1 {
		return Failf(ExitUsage, "gc takes exactly one directory")
	}
	g := GlobalsFrom(c)
	minAge, dry := c.Duration("min-age"), c.Bool("dry-run")
	if minAge < 0 {
		return Failf(ExitUsage, "--min-age %s is negative", minAge)
	}
	loc, err := s3.ParseURL(c.Args().First())
	if err != nil {
		return Fail(ExitUsage, err)
	}
	cutoff := time.Now().Add(-minAge)
	var found []gcEntry
	if loc.Scheme == "file" {
		found, err = gcLocal(c.Context, loc.Dir, cutoff, dry)
	} else {
		found, err = gcStore(c.Context, c, loc, cutoff, dry)
	}
	w := c.App.Writer
	var n int
	var bytes int64
	for _, e := range found {
		if e.Kept == "" {
			n++
			bytes += e.Bytes
		}
	}
	if g.JSON {
		if found == nil {
			found = []gcEntry{}
		}
		if jerr := writeJSON(w, struct {
			DryRun  bool      `json:"dryRun"`
			Removed int       `json:"removed"`
			Bytes   int64     `json:"bytes"`
			Entries []gcEntry `json:"entries"`
		}{dry, n, bytes, found}); jerr != nil && err == nil {
			err = jerr
		}
	} else {
		verb := "removed"
		if dry {
			verb = "would remove"
		}
		for _, e := range found {
			if e.Kept != "" {
				if !g.Quiet {
					fmt.Fprintf(w, "kept %s: %s\n", e.Path, e.Kept)
				}
				continue
			}
			fmt.Fprintf(w, "%s %s (%s)\n", verb, e.Path, plural(int(e.Bytes), "byte"))
		}
		if !g.Quiet {
			fmt.Fprintf(w, "%s %s, %s\n", verb, plural(n, "entry"), plural(int(bytes), "byte"))
		}
	}
	if err != nil {
		return Fail(ExitIO, err)
	}
	return nil
}

// gcLocal walks root; scratch entries are not descended into.
func gcLocal(ctx context.Context, root string, cutoff time.Time, dry bool) ([]gcEntry, error) {
	fi, err := os.Stat(root)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", root)
	}
	var out []gcEntry
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			return nil // unreadable below root: not ours to judge
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if p == root || !isScratchName(d.Name()) {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 || !(d.IsDir() || d.Type().IsRegular()) {
			return nil
		}
		e := gcEntry{Path: p}
		hasMeta := false
		werr := filepath.WalkDir(p, func(q string, dd fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := dd.Info()
			if err != nil {
				return err
			}
			if info.ModTime().After(e.MTime) {
				e.MTime = info.ModTime()
			}
			if dd.Type().IsRegular() {
				e.Bytes += info.Size()
				if dd.Name() == s3.MetadataName {
					hasMeta = true
				}
			}
			return nil
		})
		switch {
		case werr != nil:
			e.Kept = "unreadable: " + werr.Error()
		case hasMeta:
			e.Kept = "holds a " + s3.MetadataName + " file"
		case e.MTime.After(cutoff):
			e.Kept = "changed " + time.Since(e.MTime).Round(time.Second).String() + " ago (--min-age)"
		case !dry:
			if rerr := os.RemoveAll(p); rerr != nil {
				return rerr
			}
		}
		out = append(out, e)
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
	return out, err
}

// gcStore removes objects of a remote store that have a key segment with
// the scratch prefix, grouped by the first such segment.
func gcStore(ctx context.Context, c *cli.Context, loc s3.Location, cutoff time.Time, dry bool) ([]gcEntry, error) {
	st, err := s3.OpenLocation(ctx, loc, s3.OpenOptions{S3: s3Options(c)})
	if err != nil {
		return nil, err
	}
	objs, err := st.List(ctx, "")
	if err != nil {
		return nil, err
	}
	groups := map[string][]s3.ObjectInfo{}
	for _, o := range objs {
		segs := strings.Split(o.Key, "/")
		for i, s := range segs {
			if isScratchName(s) {
				r := strings.Join(segs[:i+1], "/")
				groups[r] = append(groups[r], o)
				break
			}
		}
	}
	roots := make([]string, 0, len(groups))
	for r := range groups {
		roots = append(roots, r)
	}
	sort.Strings(roots)
	var out []gcEntry
	for _, r := range roots {
		e := gcEntry{Path: st.String() + "/" + r}
		hasMeta := false
		for _, o := range groups[r] {
			e.Bytes += o.Size
			if o.ModTime.After(e.MTime) {
				e.MTime = o.ModTime
			}
			if o.Key == s3.MetadataName || strings.HasSuffix(o.Key, "/"+s3.MetadataName) {
				hasMeta = true
			}
		}
		switch {
		case hasMeta:
			e.Kept = "holds a " + s3.MetadataName + " object"
		case e.MTime.After(cutoff):
			e.Kept = "changed " + time.Since(e.MTime).Round(time.Second).String() + " ago (--min-age)"
		case !dry:
			for _, o := range groups[r] {
				if err := st.Delete(ctx, o.Key); err != nil {
					return out, err
				}
			}
		}
		out = append(out, e)
	}
	pending, err := gcPendingUploads(ctx, st, cutoff, dry)
	return append(out, pending...), err
}

// gcPendingUploads aborts the unfinished multipart uploads under st's
// prefix started before cutoff. A writer aborts its own uploads when it
// fails or is interrupted; these are what a killed one left.
func gcPendingUploads(ctx context.Context, st s3.Storage, cutoff time.Time, dry bool) ([]gcEntry, error) {
	for {
		u, ok := st.(interface{ Unwrap() s3.Storage })
		if !ok {
			break
		}
		st = u.Unwrap()
	}
	s, ok := st.(*s3.S3)
	if !ok {
		return nil, nil
	}
	ups, err := s.PendingUploads(ctx)
	if err != nil {
		return nil, err
	}
	var out []gcEntry
	for _, u := range ups {
		e := gcEntry{Path: s.String() + "/" + u.Key + " (unfinished multipart upload " + u.UploadID + ")", MTime: u.Started}
		switch {
		case u.Started.After(cutoff):
			e.Kept = "started " + time.Since(u.Started).Round(time.Second).String() + " ago (--min-age)"
		case !dry:
			if err := s.AbortPending(ctx, u); err != nil {
				return out, err
			}
		}
		out = append(out, e)
	}
	return out, nil
}
