package savepoint

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// v3Copy writes the metadata of a fixture re-encoded as version 3 (no
// checkpoint-properties trailer) into a temp dir, with the fixture's
// relative state files beside it, and opens it.
func v3Copy(t *testing.T, fixture string) *Savepoint {
	t.Helper()
	md, err := ParseMetadata(readFixtureMetadata(t, fixture), fixture)
	if err != nil {
		t.Fatal(err)
	}
	md.Version, md.Trailer = 3, nil
	b, err := EncodeMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, MetadataName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	src := fixtureDir(t, fixture)
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || e.Name() == MetadataName {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sp := openDir(t, dir)
	if sp.Props != nil || sp.PropsErr != nil || sp.FormatType() != "" {
		t.Fatalf("%s as V3 still has properties", fixture)
	}
	return sp
}

// TestFormatInferredWithoutTrailer: V3 metadata records no format type;
// the summary infers it from the keyed handles and says so.
func TestFormatInferredWithoutTrailer(t *testing.T) {
	for _, c := range []struct {
		fixture          string
		before, after    string // metadata only; after a scan
		inferredMetaOnly bool
	}{
		{"flink1.20-rocksdb-NATIVE-incremental-for-contrast", FormatNative, FormatNative, true},
		{"flink1.20-rocksdb-canonical-valuestate-timers", FormatCanonical, FormatCanonical, true},
		// Tag 12 alone is ambiguous until the blocks are probed.
		{"flink1.20-hashmap-NATIVE-for-contrast", "UNKNOWN", FormatNative, false},
	} {
		sp := v3Copy(t, c.fixture)
		sum := Summarize(sp)
		if sum.FormatType != c.before || sum.FormatInferred != c.inferredMetaOnly {
			t.Errorf("%s: metadata only: %q inferred=%v, want %q", c.fixture, sum.FormatType, sum.FormatInferred, c.before)
		}
		if err := ScanSummary(context.Background(), sp, sum, ScanOptions{KeyGroupTo: -1}); err != nil {
			t.Fatalf("%s: %v", c.fixture, err)
		}
		if sum.FormatType != c.after || !sum.FormatInferred {
			t.Errorf("%s: after the scan: %q inferred=%v, want %q", c.fixture, sum.FormatType, sum.FormatInferred, c.after)
		}
	}
	// A recorded format is never marked inferred.
	sum := Summarize(openFixture(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast"))
	if sum.FormatType != FormatNative || sum.FormatInferred {
		t.Fatalf("recorded format: %q inferred=%v", sum.FormatType, sum.FormatInferred)
	}
}
