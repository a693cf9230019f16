package engine

import (
	"encoding/binary"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// goTTLFilter is the same TTL rule as the native filter, as a Go callback.
type goTTLFilter struct {
	ttl   int64
	clock *Clock
}

func (f goTTLFilter) Filter(_ int, _, val []byte) (bool, []byte) {
	if len(val) < 8 {
		return false, nil
	}
	ts := int64(binary.BigEndian.Uint64(val))
	return ts+f.ttl <= f.clock.Now(), nil
}
func (f goTTLFilter) Name() string            { return "sfstate.ttl.go" }
func (f goTTLFilter) SetIgnoreSnapshots(bool) {}
func (f goTTLFilter) Destroy()                {}

// BenchmarkTTLCompactionFilter compacts 200k entries (half expired) with the
// native prefix filter and with a Go callback doing the same.
func BenchmarkTTLCompactionFilter(b *testing.B) {
	const n = 200_000
	for _, kind := range []string{"native", "go"} {
		b.Run(kind, func(b *testing.B) {
			clock := NewManualClock(1_000_000)
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				opts := grocksdb.NewDefaultOptions()
				opts.SetCreateIfMissing(true)
				opts.SetDisableAutoCompactions(true)
				if kind == "native" {
					opts.SetCompactionFilter(grocksdb.NewNativeCompactionFilter(unsafe.Pointer(newNativeTTLFilter(1000, clock))))
				} else {
					opts.SetCompactionFilter(goTTLFilter{ttl: 1000, clock: clock})
				}
				db, err := grocksdb.OpenDb(opts, filepath.Join(b.TempDir(), "db"))
				if err != nil {
					b.Fatal(err)
				}
				wo := grocksdb.NewDefaultWriteOptions()
				wo.DisableWAL(true)
				wb := grocksdb.NewWriteBatch()
				val := make([]byte, 40)
				for j := 0; j < n; j++ {
					binary.BigEndian.PutUint64(val, uint64(1_000_000-500*(j%2)*2)) // odd j expired at 1_000_000
					wb.Put(binary.BigEndian.AppendUint64(nil, uint64(j)), val)
					if wb.Count() == 10_000 {
						_ = db.Write(wo, wb)
						wb.Clear()
					}
				}
				_ = db.Write(wo, wb)
				fo := grocksdb.NewDefaultFlushOptions()
				fo.SetWait(true)
				_ = db.Flush(fo)
				b.StartTimer()
				db.CompactRange(grocksdb.Range{})
				b.StopTimer()
				wb.Destroy()
				wo.Destroy()
				fo.Destroy()
				db.Close()
				opts.Destroy()
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mentries/s")
		})
	}
}
