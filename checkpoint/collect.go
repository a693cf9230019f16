package checkpoint

import (
	"context"
	"fmt"
	"strings"

	"github.com/sfstate/sfstate/savepoint"
)

// Collect applies retention: it keeps the newest Options.Retain completed
// checkpoints (all when Retain is zero), deletes older ones (`_metadata`
// first, so a partly deleted checkpoint is never taken for complete),
// deletes leftovers of failed checkpoints, and deletes every shared SST
// object that no retained checkpoint, no checkpoint in flight and no
// future incremental checkpoint of this Checkpointer can reference. If a
// retained checkpoint's manifest cannot be read, no shared object is
// deleted. Collect runs automatically after each completed checkpoint
// when Retain > 0.
func (c *Checkpointer) Collect(ctx context.Context) error {
	c.gc.Lock()
	defer c.gc.Unlock()
	ids, err := Completed(ctx, c.store)
	if err != nil {
		return fmt.Errorf("checkpoint: retention: %w", err)
	}
	keep := ids
	if c.opts.Retain > 0 && len(ids) > c.opts.Retain {
		keep = ids[len(ids)-c.opts.Retain:]
		for _, id := range ids[:len(ids)-c.opts.Retain] {
			if err := c.deleteCheckpoint(ctx, id); err != nil {
				return err
			}
		}
	}
	// Leftovers of checkpoints that never published (not in flight: their
	// uploads hold gc shared, and Take writes nothing to the store).
	complete := map[int64]bool{}
	for _, id := range keep {
		complete[id] = true
	}
	objs, err := c.store.List(ctx, "chk-")
	if err != nil {
		return fmt.Errorf("checkpoint: retention: %w", err)
	}
	c.mu.Lock()
	inFlight := map[int64]bool{}
	for id := range c.pending {
		inFlight[id] = true
	}
	c.mu.Unlock()
	for _, o := range objs {
		dir, _, _ := strings.Cut(o.Key, "/")
		id, ok := savepoint.CheckpointDirID(dir)
		if !ok || complete[id] || inFlight[id] {
			continue
		}
		if err := c.store.Delete(ctx, o.Key); err != nil {
			return fmt.Errorf("checkpoint: retention: delete %s: %w", o.Key, err)
		}
	}
	// Shared objects still referenced.
	refs := map[string]bool{}
	for _, id := range keep {
		m, err := ReadManifest(ctx, c.store, id)
		if err != nil {
			return fmt.Errorf("checkpoint: retention: retained checkpoint %d: %w (no shared file deleted)", id, err)
		}
		for _, s := range m.Subtasks {
			for _, f := range s.Shared {
				refs[f.Key] = true
			}
		}
	}
	c.mu.Lock()
	for _, p := range c.pending {
		for k := range p {
			refs[k] = true
		}
	}
	for _, st := range c.subtasks {
		for _, o := range st.uploaded {
			refs[o.key] = true
		}
	}
	c.mu.Unlock()
	shared, err := c.store.List(ctx, SharedPrefix)
	if err != nil {
		return fmt.Errorf("checkpoint: retention: %w", err)
	}
	for _, o := range shared {
		if refs[o.Key] {
			continue
		}
		if err := c.store.Delete(ctx, o.Key); err != nil {
			return fmt.Errorf("checkpoint: retention: delete %s: %w", o.Key, err)
		}
	}
	return nil
}

func (c *Checkpointer) deleteCheckpoint(ctx context.Context, id int64) error {
	if err := c.store.Delete(ctx, MetadataKey(id)); err != nil {
		return fmt.Errorf("checkpoint: retention: delete checkpoint %d: %w", id, err)
	}
	objs, err := c.store.List(ctx, Dir(id)+"/")
	if err != nil {
		return fmt.Errorf("checkpoint: retention: delete checkpoint %d: %w", id, err)
	}
	for _, o := range objs {
		if err := c.store.Delete(ctx, o.Key); err != nil {
			return fmt.Errorf("checkpoint: retention: delete %s: %w", o.Key, err)
		}
	}
	return nil
}
