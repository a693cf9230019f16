package savepoint

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/s3"
)

func TestCheckpointDirID(t *testing.T) {
	for name, want := range map[string]int64{"chk-0": 0, "chk-7": 7, "chk-1234567890123": 1234567890123} {
		if id, ok := CheckpointDirID(name); !ok || id != want {
			t.Errorf("%s: %d %v", name, id, ok)
		}
	}
	for _, bad := range []string{"chk-", "chk-07", "chk--1", "chk-1a", "chk-99999999999999999999", "Chk-1", "chk-+1", "savepoint-1"} {
		if _, ok := CheckpointDirID(bad); ok {
			t.Errorf("%s accepted", bad)
		}
	}
}

// putCheckpointTree lays out a checkpoint root in st: two jobs with
// completed and in-progress checkpoints, their shared directories and a
// savepoint beside them.
func putCheckpointTree(t *testing.T, st s3.Storage, prefix string) {
	t.Helper()
	ctx := context.Background()
	md, err := EncodeMetadata(&Metadata{Version: 3, CheckpointID: 1})
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"ck/aaaa/chk-7/" + MetadataName:         md,
		"ck/aaaa/chk-7/f":                       []byte("x"),
		"ck/aaaa/chk-12/" + MetadataName:        md,
		"ck/aaaa/chk-13/f":                      []byte("in progress"),
		"ck/aaaa/shared/s1":                     []byte("x"),
		"ck/aaaa/shared/chk-99/" + MetadataName: md, // never looked at
		"ck/bbbb/chk-3/" + MetadataName:         md,
		"ck/bbbb/taskowned/t":                   []byte("x"),
		"ck/cccc/chk-5/f":                       []byte("failed"),
		"other/readme":                          []byte("x"),
		"sp/savepoint-1/" + MetadataName:        md,
	}
	for k, v := range files {
		if err := st.Put(ctx, s3.JoinKey(prefix, k), bytes.NewReader(v), int64(len(v))); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLocate(t *testing.T) {
	ctx := context.Background()
	local := t.TempDir()
	stores := map[string]s3.Storage{"mem": s3.NewMem(), "local": mustLocal(t, local)}
	for name, st := range stores {
		putCheckpointTree(t, st, "")
		if name == "local" {
			// Job bbbb's checkpoint is the newest across the root.
			now := time.Now()
			os.Chtimes(filepath.Join(local, "ck/aaaa/chk-12", MetadataName), now.Add(-time.Hour), now.Add(-time.Hour))
		}
		cases := []struct {
			prefix string
			o      LocateOptions
			key    string
			level  string
		}{
			{"sp/savepoint-1", LocateOptions{}, "sp/savepoint-1/_metadata", ""},
			{"sp/savepoint-1/_metadata", LocateOptions{}, "sp/savepoint-1/_metadata", ""},
			{"ck/aaaa/chk-7", LocateOptions{}, "ck/aaaa/chk-7/_metadata", ""},
			{"ck/aaaa/chk-7/", LocateOptions{Checkpoint: 7}, "ck/aaaa/chk-7/_metadata", ""},
			{"ck/aaaa", LocateOptions{}, "ck/aaaa/chk-12/_metadata", "job"},
			{"ck/aaaa", LocateOptions{Checkpoint: 7}, "ck/aaaa/chk-7/_metadata", "job"},
			{"ck", LocateOptions{Checkpoint: 12}, "ck/aaaa/chk-12/_metadata", "root"},
			{"ck", LocateOptions{Checkpoint: 3}, "ck/bbbb/chk-3/_metadata", "root"},
		}
		if name == "local" {
			cases = append(cases, struct {
				prefix string
				o      LocateOptions
				key    string
				level  string
			}{"ck", LocateOptions{}, "ck/bbbb/chk-3/_metadata", "root"})
		}
		for _, c := range cases {
			tg, err := Locate(ctx, st, c.prefix, c.o)
			if err != nil {
				t.Errorf("%s %s: %v", name, c.prefix, err)
				continue
			}
			if tg.MetadataKey != c.key {
				t.Errorf("%s %s %+v: %s, want %s", name, c.prefix, c.o, tg.MetadataKey, c.key)
			}
			if (tg.Picked != nil) != (c.level != "") || (tg.Picked != nil && tg.Picked.Level != c.level) {
				t.Errorf("%s %s: picked %+v, want level %q", name, c.prefix, tg.Picked, c.level)
			}
			if strings.Contains(c.key, "chk-") && tg.Kind != "checkpoint" {
				t.Errorf("%s %s: kind %s", name, c.prefix, tg.Kind)
			}
			if tg.Picked != nil && !strings.Contains(tg.Picked.String(), "using checkpoint") {
				t.Errorf("note %q", tg.Picked.String())
			}
		}
		tg, err := Locate(ctx, st, "ck/aaaa", LocateOptions{})
		if err != nil || tg.Picked.Completed != 2 || tg.Picked.Reason != "newest completed" || tg.CheckpointID != 12 {
			t.Errorf("%s: job pick %+v %v", name, tg, err)
		}
		for _, bad := range []struct {
			prefix string
			o      LocateOptions
			want   string
		}{
			{"other", LocateOptions{}, "no _metadata (not a savepoint or checkpoint directory)"},
			{"nothing/here", LocateOptions{}, "no _metadata"},
			{"sp", LocateOptions{}, "sfstate ls"},
			{"ck/cccc", LocateOptions{}, "none of the 1 chk-<id> directories is complete"},
			{"ck/aaaa", LocateOptions{Checkpoint: 13}, "no completed checkpoint 13"},
			{"ck/aaaa/chk-7", LocateOptions{Checkpoint: 8}, "checkpoint 8 was asked for"},
			{"ck/aaaa/chk-8/_metadata", LocateOptions{}, "no _metadata"},
		} {
			_, err := Locate(ctx, st, bad.prefix, bad.o)
			if err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Errorf("%s %s: %v, want %q", name, bad.prefix, err, bad.want)
			}
		}
		if _, err := Locate(ctx, st, "other", LocateOptions{}); !errors.Is(err, ErrNoSnapshot) {
			t.Errorf("%s: %v is not ErrNoSnapshot", name, err)
		}
		// A listing bound is enforced.
		if _, err := Locate(ctx, st, "ck", LocateOptions{MaxListing: 2}); err == nil || !strings.Contains(err.Error(), "more than 2 entries") {
			t.Errorf("%s: bound: %v", name, err)
		}
		found, trunc, err := FindSnapshots(ctx, st, "", FindOptions{})
		if err != nil || trunc {
			t.Fatal(err, trunc)
		}
		var keys []string
		for _, f := range found {
			keys = append(keys, f.MetadataKey)
		}
		want := "ck/aaaa/chk-12/_metadata ck/aaaa/chk-7/_metadata ck/bbbb/chk-3/_metadata sp/savepoint-1/_metadata"
		if strings.Join(keys, " ") != want {
			t.Errorf("%s: found %v, want %s", name, keys, want)
		}
		if found[0].Kind != "checkpoint" || found[0].CheckpointID != 12 || found[3].Kind != "savepoint" || found[0].MetadataSize == 0 {
			t.Errorf("%s: %+v", name, found)
		}
		if _, trunc, _ := FindSnapshots(ctx, st, "", FindOptions{MaxDirs: 3}); !trunc {
			t.Errorf("%s: MaxDirs did not truncate", name)
		}
	}
}

// TestLocateFollowsSymlinks: a local directory of links to snapshots
// (the way fixtures are gathered for tests) is searched through them.
func TestLocateFollowsSymlinks(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	putCheckpointTree(t, mustLocal(t, filepath.Join(base, "real")), "")
	links := filepath.Join(base, "links")
	os.MkdirAll(links, 0o755)
	if err := os.Symlink(filepath.Join(base, "real", "ck"), filepath.Join(links, "ck")); err != nil {
		t.Fatal(err)
	}
	st := mustLocal(t, links)
	tg, err := Locate(ctx, st, "ck/aaaa", LocateOptions{})
	if err != nil || tg.MetadataKey != "ck/aaaa/chk-12/_metadata" {
		t.Fatalf("%+v %v", tg, err)
	}
	found, _, err := FindSnapshots(ctx, st, "", FindOptions{})
	if err != nil || len(found) != 3 {
		t.Fatalf("%+v %v", found, err)
	}
}
