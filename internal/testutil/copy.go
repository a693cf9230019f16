package testutil

import (
	"context"
	"fmt"

	"github.com/sfstate/sfstate/s3"
)

// CopyStore copies every object of src to the same key of dst (for
// seeding a test or benchmark store).
func CopyStore(ctx context.Context, src, dst s3.Storage) error {
	objs, err := src.List(ctx, "")
	if err != nil {
		return err
	}
	for _, o := range objs {
		rc, err := src.Get(ctx, o.Key)
		if err != nil {
			return err
		}
		err = dst.Put(ctx, o.Key, rc, o.Size)
		rc.Close()
		if err != nil {
			return fmt.Errorf("copy %s: %w", o.Key, err)
		}
	}
	return nil
}
