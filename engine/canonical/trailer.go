package canonical

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sfstate/sfstate/savepoint"
)

// errNoTrailer is returned for Flink versions without a known trailer.
var errNoTrailer = errors.New("canonical: no CheckpointProperties trailer for this Flink version")

// CheckpointPropertiesTrailer returns the Java-serialized
// CheckpointProperties that Flink 1.16-1.20 append to a V4 `_metadata` of
// a manual canonical savepoint (name "Savepoint", no post-checkpoint
// action, forced, nothing discarded). flinkVersion is "1.16" ... "1.20";
// other versions have no V4 trailer (write V3, which they all read). The
// encoding itself is savepoint.SavepointTrailer's.
func CheckpointPropertiesTrailer(flinkVersion string) ([]byte, error) {
	switch strings.TrimSpace(flinkVersion) {
	case "1.16", "1.17", "1.18", "1.19", "1.20":
	default:
		return nil, fmt.Errorf("%w %q (known: 1.16-1.20; use metadata V3 for 1.15 and 2.x)", errNoTrailer, flinkVersion)
	}
	return savepoint.SavepointTrailer(savepoint.Properties{
		Forced:               true,
		FormatType:           savepoint.FormatCanonical,
		Name:                 "Savepoint",
		PostCheckpointAction: "NONE",
	})
}
