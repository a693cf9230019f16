package canonical

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sfstate/sfstate/savepoint"
)

// errNoTrailer is returned for Flink versions without a known trailer.
var errNoTrailer = errors.New("canonical: no CheckpointProperties trailer for this Flink version")

// MetadataVersionFor returns the `_metadata` version Export writes for a
// target Flink release:
//
//	"" (any Flink 1.15-2.x) and "1.15"  → 3 (no trailer; every release reads it)
//	"1.16" ... "1.20"                   → 4 (V3 body + CheckpointProperties trailer)
//	"2.0", "2.1", ... or "2.x"          → 5 (V4 + operator name and uid)
//
// Flink 2.0 writes V5. V6 (written by later 2.x releases) only changes how
// unaligned-checkpoint channel state is encoded, which a savepoint never
// holds; as the first release writing V6 could not be pinned down, every 2.x
// target gets V5, which every 2.x reads. ExportOptions.MetadataVersion asks
// for 6 explicitly.
func MetadataVersionFor(flinkVersion string) (int, error) {
	v := strings.TrimSpace(flinkVersion)
	switch v {
	case "", "1.15":
		return 3, nil
	case "1.16", "1.17", "1.18", "1.19", "1.20":
		return 4, nil
	case "2", "2.x":
		return 5, nil
	}
	if minor, ok := strings.CutPrefix(v, "2."); ok && minor != "" && strings.Trim(minor, "0123456789") == "" && len(minor) <= 3 {
		return 5, nil // every 2.x release reads V5
	}
	return 0, fmt.Errorf("canonical: unknown Flink version %q (known: 1.15-1.20, 2.x; empty = metadata V3, read by all)", flinkVersion)
}

// CheckpointPropertiesTrailer returns the Java-serialized
// CheckpointProperties that Flink 1.16-2.x append to a V4+ `_metadata` of
// a manual canonical savepoint (name "Savepoint", no post-checkpoint
// action, forced, nothing discarded). flinkVersion is "1.16" ... "1.20" or
// a 2.x release: CheckpointProperties (serialVersionUID 2) and
// SavepointType (default serialVersionUID, class unchanged since 1.15) are
// the same classes in all of them, so the bytes are too. 1.15 has no
// trailer (V3). The encoding itself is savepoint.SavepointTrailer's.
func CheckpointPropertiesTrailer(flinkVersion string) ([]byte, error) {
	v, err := MetadataVersionFor(flinkVersion)
	if err != nil {
		return nil, err
	}
	if v < 4 {
		return nil, fmt.Errorf("%w %q (metadata V3 has none)", errNoTrailer, flinkVersion)
	}
	return savepointTrailer()
}

func savepointTrailer() ([]byte, error) {
	return savepoint.SavepointTrailer(savepoint.Properties{
		Forced:               true,
		FormatType:           savepoint.FormatCanonical,
		Name:                 "Savepoint",
		PostCheckpointAction: "NONE",
	})
}
