package statebench

import (
	"testing"

	"github.com/sfstate/sfstate/engine"
)

func TestRunMemorySmoke(t *testing.T) {
	rows, err := runMemory(StateBenchConfig{ManagedMemory: 64 << 20, MemoryBytes: 1 << 20}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 || rows[0].WriteBufferSize != 64<<20 || rows[3].WriteBufferSize != 2<<20 {
		t.Fatalf("rows %+v", rows)
	}
	for _, r := range rows {
		if r.ArenaBlockSize != engine.ArenaBlockSize(min(r.WriteBufferSize, r.WriteBufferShare), r.WriteBufferCap) || r.CacheCapacity <= 0 ||
			r.WriteBufferShare > r.WriteBufferCap/int64(2*r.Operators) || r.TotalNative != r.CacheUsage+r.TableReadersMem {
			t.Fatalf("row %+v", r)
		}
		t.Logf("%+v", r)
	}
}
