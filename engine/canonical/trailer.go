package canonical

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sfstate/sfstate/savepoint/flinkwrite"
)

// errNoTrailer is returned for Flink versions without a known trailer.
var errNoTrailer = errors.New("canonical: no CheckpointProperties trailer for this Flink version")

// The Java classes of the V4 `_metadata` trailer (CheckpointProperties of a
// manual savepoint), with the serialVersionUIDs Flink 1.16-1.20 use.
var (
	classSnapshotFormat = flinkwrite.NewEnumClass("org.apache.flink.core.execution.SavepointFormatType")
	classPostAction     = flinkwrite.NewEnumClass("org.apache.flink.runtime.checkpoint.SavepointType$PostCheckpointAction")
	savepointTypeSUID   = uint64(0xa087d308a45814b8)
	classSavepointType  = &flinkwrite.JavaClass{
		Name:  "org.apache.flink.runtime.checkpoint.SavepointType",
		SUID:  int64(savepointTypeSUID),
		Flags: flinkwrite.SCSerializable,
		Fields: []flinkwrite.JavaField{
			{Name: "formatType", Type: 'L', Signature: "Lorg/apache/flink/core/execution/SavepointFormatType;"},
			{Name: "name", Type: 'L', Signature: "Ljava/lang/String;"},
			{Name: "postCheckpointAction", Type: 'L', Signature: "Lorg/apache/flink/runtime/checkpoint/SavepointType$PostCheckpointAction;"},
		},
	}
	classCheckpointProps = &flinkwrite.JavaClass{
		Name:  "org.apache.flink.runtime.checkpoint.CheckpointProperties",
		SUID:  2,
		Flags: flinkwrite.SCSerializable,
		Fields: []flinkwrite.JavaField{
			{Name: "discardCancelled", Type: 'Z'},
			{Name: "discardFailed", Type: 'Z'},
			{Name: "discardFinished", Type: 'Z'},
			{Name: "discardSubsumed", Type: 'Z'},
			{Name: "discardSuspended", Type: 'Z'},
			{Name: "forced", Type: 'Z'},
			{Name: "unclaimed", Type: 'Z'},
			{Name: "checkpointType", Type: 'L', Signature: "Lorg/apache/flink/runtime/checkpoint/SnapshotType;"},
		},
	}
)

// CheckpointPropertiesTrailer returns the Java-serialized
// CheckpointProperties that Flink 1.16-1.20 append to a V4 `_metadata` of
// a manual canonical savepoint (name "Savepoint", no post-checkpoint
// action, forced, nothing discarded). flinkVersion is "1.16" ... "1.20";
// other versions have no V4 trailer (write V3, which they all read).
func CheckpointPropertiesTrailer(flinkVersion string) ([]byte, error) {
	switch strings.TrimSpace(flinkVersion) {
	case "1.16", "1.17", "1.18", "1.19", "1.20":
	default:
		return nil, fmt.Errorf("%w %q (known: 1.16-1.20; use metadata V3 for 1.15 and 2.x)", errNoTrailer, flinkVersion)
	}
	st := &flinkwrite.JavaObject{Class: classSavepointType, Fields: map[string]any{
		"formatType":           &flinkwrite.JavaEnum{Class: classSnapshotFormat, Name: "CANONICAL"},
		"name":                 "Savepoint",
		"postCheckpointAction": &flinkwrite.JavaEnum{Class: classPostAction, Name: "NONE"},
	}}
	props := &flinkwrite.JavaObject{Class: classCheckpointProps, Fields: map[string]any{
		"discardCancelled": false, "discardFailed": false, "discardFinished": false,
		"discardSubsumed": false, "discardSuspended": false,
		"forced": true, "unclaimed": false,
		"checkpointType": st,
	}}
	return flinkwrite.EncodeJavaStream(props)
}
