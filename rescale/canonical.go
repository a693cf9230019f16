package rescale

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"

	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
)

// canonicalTrailer makes md a savepoint of format CANONICAL (Options.Canonical):
// metadata version 4 at least (the first with the CheckpointProperties
// trailer) and a trailer as Flink writes for a savepoint. A source savepoint
// keeps its flags, name and post-checkpoint action; a checkpoint (or a V2/V3
// file without trailer) gets those of CheckpointProperties.forSavepoint:
// forced, nothing discarded, name "Savepoint", action NONE.
func canonicalTrailer(src *savepoint.Savepoint, md *savepoint.Metadata) error {
	p := savepoint.Properties{Forced: true, Name: "Savepoint", PostCheckpointAction: "NONE"}
	if sp := src.Props; sp != nil && sp.IsSavepoint() {
		p = *sp
		if p.Name == "" {
			p.Name = "Savepoint"
		}
		switch p.PostCheckpointAction {
		case "NONE", "SUSPEND", "TERMINATE":
		default:
			p.PostCheckpointAction = "NONE"
		}
	}
	p.FormatType = savepoint.FormatCanonical
	tr, err := savepoint.SavepointTrailer(p)
	if err != nil {
		return fmt.Errorf("rescale: canonical trailer: %w", err)
	}
	if md.Version < 4 {
		md.Version = 4
	}
	md.Trailer = tr
	return nil
}

// absCopyName names the destination copy of an absolute source file: a
// hash of its URI (distinct files never collide) and its base name.
func absCopyName(uri string, loc savepoint.Location) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%d", uri, loc.Start, loc.Size)))
	return "copied-" + hex.EncodeToString(sum[:8]) + "-" + path.Base(loc.Key)
}

// copyLocation copies the bytes of loc (a whole file or a segment of one)
// from the source to name under the destination.
func (t *translator) copyLocation(ctx context.Context, name string, loc savepoint.Location) (s3.Written, error) {
	obj, err := t.req.Src.OpenLocation(ctx, loc, 1<<20)
	if err != nil {
		return s3.Written{}, fmt.Errorf("rescale: %s: %w", loc.Name, err)
	}
	if loc.Size >= 0 && !loc.Segment && obj.Size() != loc.Size {
		return s3.Written{}, fmt.Errorf("%w: %s has %d bytes, its handle records %d", savepoint.ErrFormat, loc.Name, obj.Size(), loc.Size)
	}
	var r io.Reader = io.NewSectionReader(obj, 0, obj.Size())
	w, err := s3.PutHashed(ctx, t.req.Dst, name, progressReader{r, t.req.Progress}, obj.Size())
	if err != nil {
		return s3.Written{}, fmt.Errorf("rescale: copying %s: %w", loc.Name, err)
	}
	return w, nil
}
