package command

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/keyed"
	"github.com/urfave/cli/v2"
)

// inspectDumpLine is one --dump output line.
type inspectDumpLine struct {
	Operator     string `json:"operator"`
	Subtask      int    `json:"subtask"`
	KeyGroup     int    `json:"keyGroup"`
	State        string `json:"state"`
	Kind         string `json:"kind"`
	Key          any    `json:"key"`
	Namespace    any    `json:"namespace"`
	UserKey      any    `json:"userKey,omitempty"`
	Value        any    `json:"value"`
	TTLTimestamp *int64 `json:"ttlTimestamp,omitempty"`
	// Entries of partial states (serializers that could not be read) carry
	// their raw key and value bytes (base64) and "decoded": false, and the
	// parts that were decoded (a changelog entry's namespace and value
	// when only its key serializer is unknown).
	Decoded    *bool  `json:"decoded,omitempty"`
	KeyBytes   []byte `json:"keyBytes,omitempty"`
	ValueBytes []byte `json:"valueBytes,omitempty"`
}

// newDumpLine is the dump line of one decoded entry of subtask subtask of
// operator op.
func newDumpLine(op *savepoint.OperatorState, subtask int, e *keyed.Entry) inspectDumpLine {
	if e.State.Partial != "" {
		no := false
		return inspectDumpLine{
			Operator: op.ID.String(), Subtask: subtask, KeyGroup: e.KeyGroup,
			State: e.State.Name, Kind: savepoint.StateKind(e.State),
			Namespace: e.Namespace, UserKey: e.UserKey, Value: e.Value,
			Decoded: &no, KeyBytes: e.KeyBytes, ValueBytes: e.ValueBytes,
		}
	}
	return inspectDumpLine{
		Operator: op.ID.String(), Subtask: subtask, KeyGroup: e.KeyGroup,
		State: e.State.Name, Kind: savepoint.StateKind(e.State),
		Key: e.Key, Namespace: e.Namespace, UserKey: e.UserKey, Value: e.Value,
		TTLTimestamp: e.TTLTimestamp,
	}
}

func runDump(c *cli.Context, sp *savepoint.Savepoint, o savepoint.ScanOptions) error {
	w := bufio.NewWriterSize(c.App.Writer, 64<<10)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	limit := c.Int64("limit")
	var n int64
	err := sp.WalkKeyed(c.Context, o, func(e *savepoint.KeyedEntry) error {
		if limit > 0 && n >= limit {
			return savepoint.StopWalk
		}
		line := newDumpLine(e.Operator, e.Subtask, e.Entry)
		if err := enc.Encode(&line); err != nil {
			return fmt.Errorf("writing entry: %w", err)
		}
		n++
		return nil
	})
	if ferr := w.Flush(); ferr != nil && err == nil {
		err = ferr
	}
	if err != nil && !savepoint.IsStop(err) {
		if errors.Is(err, savepoint.ErrNativeLayout) {
			return Fail(ExitIO, fmt.Errorf("%w; use inspect without --dump to list its files and sizes", err))
		}
		return Fail(ExitIO, err)
	}
	return nil
}
