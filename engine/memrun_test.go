package engine

import "testing"

func TestRunMemorySmoke(t *testing.T) {
	rows, err := runMemory(StateBenchConfig{ManagedMemory: 64 << 20, MemoryBytes: 1 << 20}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 6 || rows[0].WriteBufferSize != 64<<20 || rows[3].WriteBufferSize != 2<<20 {
		t.Fatalf("rows %+v", rows)
	}
	for _, r := range rows {
		if r.ArenaBlockSize != ArenaBlockSize(r.WriteBufferSize, r.WriteBufferCap) || r.CacheCapacity <= 0 {
			t.Fatalf("row %+v", r)
		}
		t.Logf("%+v", r)
	}
}
