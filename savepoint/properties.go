package savepoint

import (
	"fmt"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/savepoint/javaser"
)

// Savepoint format types recorded in the V4+ trailer.
const (
	FormatCanonical = "CANONICAL"
	FormatNative    = "NATIVE"
)

// Properties is the decoded V4+ CheckpointProperties trailer.
type Properties struct {
	Class            string `json:"class"`
	DiscardCancelled bool   `json:"discardCancelled"`
	DiscardFailed    bool   `json:"discardFailed"`
	DiscardFinished  bool   `json:"discardFinished"`
	DiscardSubsumed  bool   `json:"discardSubsumed"`
	DiscardSuspended bool   `json:"discardSuspended"`
	Forced           bool   `json:"forced"`
	Unclaimed        bool   `json:"unclaimed"`
	// SnapshotClass is the checkpointType's class: SavepointType or
	// CheckpointType.
	SnapshotClass string `json:"snapshotClass"`
	// FormatType is CANONICAL or NATIVE for savepoints ("" for checkpoints).
	FormatType string `json:"formatType,omitempty"`
	// Name is the savepoint type's name, e.g. "Savepoint", "Suspend Savepoint".
	Name string `json:"name,omitempty"`
	// PostCheckpointAction is NONE, SUSPEND or TERMINATE.
	PostCheckpointAction string `json:"postCheckpointAction,omitempty"`
}

// IsSavepoint reports whether the trailer describes a savepoint.
func (p *Properties) IsSavepoint() bool {
	return p.SnapshotClass == "org.apache.flink.runtime.checkpoint.SavepointType"
}

// Properties decodes the V4+ trailer. It returns (nil, nil) for V3 files.
// The trailer offset in errors is relative to the file.
func (md *Metadata) Properties() (*Properties, error) { return md.properties("") }

// properties is Properties with errors naming the metadata file (when
// name is not ""). Its errors are ErrFormat and an
// *errclass.CorruptionError at the file offset of the failure (the
// trailer's start when the stream decodes but holds no properties).
func (md *Metadata) properties(name string) (*Properties, error) {
	if len(md.Trailer) == 0 {
		return nil, nil
	}
	base := md.trailerOffset
	st, err := javaser.Parse(md.Trailer, base)
	if err != nil {
		// The stream's error is at its offset in the file already.
		err = fmt.Errorf("checkpoint properties trailer: %w", err)
		if name != "" {
			err = errclass.WithFile(err, name)
		}
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	obj, _ := st.First().(*javaser.Object)
	if obj == nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, errclass.Corruptf(name, base, "checkpoint properties trailer holds no object"))
	}
	p := &Properties{Class: obj.ClassName()}
	if p.Class != "org.apache.flink.runtime.checkpoint.CheckpointProperties" {
		return nil, fmt.Errorf("%w: %w", ErrFormat, errclass.Corruptf(name, base, "trailer holds %s, not CheckpointProperties", p.Class))
	}
	p.DiscardCancelled, _ = obj.Bool("discardCancelled")
	p.DiscardFailed, _ = obj.Bool("discardFailed")
	p.DiscardFinished, _ = obj.Bool("discardFinished")
	p.DiscardSubsumed, _ = obj.Bool("discardSubsumed")
	p.DiscardSuspended, _ = obj.Bool("discardSuspended")
	p.Forced, _ = obj.Bool("forced")
	p.Unclaimed, _ = obj.Bool("unclaimed")
	if ct := obj.Object("checkpointType"); ct != nil {
		p.SnapshotClass = ct.ClassName()
		p.FormatType = enumConst(ct, "formatType")
		p.Name = ct.String("name")
		p.PostCheckpointAction = enumConst(ct, "postCheckpointAction")
		if p.Name == "" {
			if v, ok := ct.Field("name"); ok {
				if s, ok := v.(string); ok {
					p.Name = s
				}
			}
		}
	} else if v, ok := obj.Field("checkpointType"); ok {
		// CheckpointType is a plain class in some versions, an enum in others.
		if e, ok := v.(*javaser.Enum); ok {
			p.SnapshotClass = e.Class.Name
			p.Name = e.Constant
		}
	}
	return p, nil
}

func enumConst(o *javaser.Object, field string) string {
	v, _ := o.Field(field)
	if e, ok := v.(*javaser.Enum); ok {
		return e.Constant
	}
	return ""
}
