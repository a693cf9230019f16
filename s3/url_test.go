package s3_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sfstate/sfstate/s3"
)

func TestParseURL(t *testing.T) {
	cwd, _ := os.Getwd()
	cases := []struct {
		in   string
		want s3.Location
	}{
		{"s3://bkt/a/b/sp-1", s3.Location{Scheme: "s3", Bucket: "bkt", Prefix: "a/b/sp-1"}},
		{"s3://bkt/a/b/sp-1/", s3.Location{Scheme: "s3", Bucket: "bkt", Prefix: "a/b/sp-1"}},
		{"s3://bkt/a/chk-3/_metadata", s3.Location{Scheme: "s3", Bucket: "bkt", Prefix: "a/chk-3", NamedMetadata: true}},
		{"s3://bkt/_metadata", s3.Location{Scheme: "s3", Bucket: "bkt", NamedMetadata: true}},
		{"s3://bkt", s3.Location{Scheme: "s3", Bucket: "bkt"}},
		{"s3a://bkt/x", s3.Location{Scheme: "s3", Bucket: "bkt", Prefix: "x"}},
		{"/data/sp-1", s3.Location{Scheme: "file", Dir: "/data/sp-1"}},
		{"/data/sp-1/_metadata", s3.Location{Scheme: "file", Dir: "/data/sp-1", NamedMetadata: true}},
		{"/data/x/../sp-1/", s3.Location{Scheme: "file", Dir: "/data/sp-1"}},
		{"file:///data/sp%201/_metadata", s3.Location{Scheme: "file", Dir: "/data/sp 1", NamedMetadata: true}},
		{"file://localhost/data/sp", s3.Location{Scheme: "file", Dir: "/data/sp"}},
		{"rel/sp", s3.Location{Scheme: "file", Dir: filepath.Join(cwd, "rel/sp")}},
	}
	for _, c := range cases {
		got, err := s3.ParseURL(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "  ", "s3://", "s3:///key", "s3://b/a/../../etc", "s3://b/./x", "s3://b/a//b",
		"gs://b/x", "hdfs://nn/x", "file://otherhost/x", "s3://b/x?versionId=1", "/a\x00b"} {
		if _, err := s3.ParseURL(bad); err == nil || !errors.Is(err, s3.ErrBadKey) {
			t.Errorf("ParseURL(%q): %v, want ErrBadKey", bad, err)
		}
	}
}

func TestOpenLocal(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	sp := filepath.Join(dir, "sp-1")
	if _, _, err := s3.Open(ctx, sp, s3.OpenOptions{}); !s3.IsNotExist(err) {
		t.Fatalf("open missing dir: %v", err)
	}
	os.MkdirAll(sp, 0o755)
	os.WriteFile(filepath.Join(sp, "_metadata"), []byte("m"), 0o644)
	var c s3.Counters
	for _, u := range []string{sp, sp + "/_metadata", "file://" + sp + "/_metadata"} {
		st, key, err := s3.Open(ctx, u, s3.OpenOptions{Counters: &c, MaxConcurrent: 4})
		if err != nil {
			t.Fatal(err)
		}
		if key != "_metadata" || string(mustGet(t, st, key)) != "m" {
			t.Fatalf("open %s: key %q", u, key)
		}
	}
	if c.Requests(s3.OpGet) != 3 || c.BytesRead() != 3 {
		t.Fatalf("counters through Open: %+v", c.Snapshot())
	}
	if _, _, err := s3.Open(ctx, filepath.Join(sp, "_metadata", "x"), s3.OpenOptions{}); err == nil {
		t.Fatal("opening a file as a directory succeeded")
	}
}
