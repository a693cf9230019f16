//go:build cgo

package recordstore

import (
	"testing"
	"time"
)

// Test helpers for the external test package (recordstore_test), whose
// tests import packages that import recordstore (checkpoint).

// TestModel is the reference join model.
type TestModel struct{ r *refJoin }

func NewTestModel(ttl int64) *TestModel {
	return &TestModel{&refJoin{ttl: ttl, rows: map[refKey]*refRow{}}}
}

func (m *TestModel) Process(now int64, in []Input) []string { return m.r.process(now, in) }
func (m *TestModel) Logical(now int64, maxP int) []string   { return m.r.logical(now, maxP) }

// VarKeyStream is varKeyStream.
func VarKeyStream(seed uint64, bundles, perBundle int) ([][]Input, []time.Duration) {
	s := varKeyStream(seed, bundles, perBundle)
	return s.bundles, s.advance
}

func Collect(t testing.TB, j *Join, in []Input) []string { return collect(t, j, in) }
func DumpLogical(t testing.TB, st JoinState) []string    { return dumpLogical(t, st) }
