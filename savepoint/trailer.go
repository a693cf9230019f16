package savepoint

import (
	"fmt"

	"github.com/sfstate/sfstate/savepoint/flinkwrite"
)

// Class descriptors of the V4+ trailer (wire format; serialVersionUIDs as
// Flink 1.16-1.20 write them).
var (
	snapshotTypeSig   = "Lorg/apache/flink/runtime/checkpoint/SnapshotType;"
	formatTypeClass   = flinkwrite.NewEnumClass("org.apache.flink.core.execution.SavepointFormatType")
	postActionClass   = flinkwrite.NewEnumClass("org.apache.flink.runtime.checkpoint.SavepointType$PostCheckpointAction")
	savepointTypeDesc = &flinkwrite.JavaClass{
		Name:  "org.apache.flink.runtime.checkpoint.SavepointType",
		SUID:  -0x5f782cf75ba7eb48, // 0xa087d308a45814b8
		Flags: flinkwrite.SCSerializable,
		Fields: []flinkwrite.JavaField{
			{Name: "formatType", Type: 'L', Signature: "Lorg/apache/flink/core/execution/SavepointFormatType;"},
			{Name: "name", Type: 'L', Signature: "Ljava/lang/String;"},
			{Name: "postCheckpointAction", Type: 'L', Signature: "Lorg/apache/flink/runtime/checkpoint/SavepointType$PostCheckpointAction;"},
		},
	}
	checkpointPropsDesc = &flinkwrite.JavaClass{
		Name:  "org.apache.flink.runtime.checkpoint.CheckpointProperties",
		SUID:  2,
		Flags: flinkwrite.SCSerializable,
		Fields: []flinkwrite.JavaField{
			{Name: "checkpointType", Type: 'L', Signature: snapshotTypeSig},
			{Name: "discardCancelled", Type: 'Z'},
			{Name: "discardFailed", Type: 'Z'},
			{Name: "discardFinished", Type: 'Z'},
			{Name: "discardSubsumed", Type: 'Z'},
			{Name: "discardSuspended", Type: 'Z'},
			{Name: "forced", Type: 'Z'},
			{Name: "unclaimed", Type: 'Z'},
		},
	}
)

// SavepointTrailer returns the V4+ trailer (a Java-serialized
// CheckpointProperties) for a savepoint, as Flink 1.16-1.20 write it. p
// supplies the flags, FormatType (CANONICAL or NATIVE), Name (e.g.
// "Savepoint", "Suspend Savepoint") and PostCheckpointAction (NONE,
// SUSPEND, TERMINATE). Use it to write V4/V5 metadata without a trailer
// copied from another file.
func SavepointTrailer(p Properties) ([]byte, error) {
	switch p.FormatType {
	case FormatCanonical, FormatNative:
	default:
		return nil, fmt.Errorf("savepoint: format type %q (want CANONICAL or NATIVE)", p.FormatType)
	}
	switch p.PostCheckpointAction {
	case "NONE", "SUSPEND", "TERMINATE":
	default:
		return nil, fmt.Errorf("savepoint: post-checkpoint action %q (want NONE, SUSPEND or TERMINATE)", p.PostCheckpointAction)
	}
	st := &flinkwrite.JavaObject{Class: savepointTypeDesc, Fields: map[string]any{
		"formatType":           &flinkwrite.JavaEnum{Class: formatTypeClass, Name: p.FormatType},
		"name":                 p.Name,
		"postCheckpointAction": &flinkwrite.JavaEnum{Class: postActionClass, Name: p.PostCheckpointAction},
	}}
	obj := &flinkwrite.JavaObject{Class: checkpointPropsDesc, Fields: map[string]any{
		"checkpointType":   st,
		"discardCancelled": p.DiscardCancelled,
		"discardFailed":    p.DiscardFailed,
		"discardFinished":  p.DiscardFinished,
		"discardSubsumed":  p.DiscardSubsumed,
		"discardSuspended": p.DiscardSuspended,
		"forced":           p.Forced,
		"unclaimed":        p.Unclaimed,
	}}
	return flinkwrite.EncodeJavaStream(obj)
}
