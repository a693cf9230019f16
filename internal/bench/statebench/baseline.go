package statebench

import "github.com/sfstate/sfstate/engine"

// perRecord adapts the engine's per-record baseline (engine.PerRecord: one
// RocksDB call per access) to the benchmarks' access interfaces.
type perRecord struct{ *engine.PerRecord }

func openPerRecord(dir string, states []engine.StateDesc, ro engine.RocksOptions) (*perRecord, error) {
	p, err := engine.OpenPerRecord(dir, states, ro)
	if err != nil {
		return nil, err
	}
	return &perRecord{p}, nil
}

func (p *perRecord) close()                                   { p.Close() }
func (p *perRecord) get(st int, key []byte) ([]byte, bool)    { return p.Get(st, key) }
func (p *perRecord) put(st int, key, payload []byte)          { p.Put(st, key, payload) }
func (p *perRecord) del(st int, key []byte)                   { p.Delete(st, key) }
func (p *perRecord) listAdd(st int, key []byte, els [][]byte) { p.ListAdd(st, key, els) }
func (p *perRecord) iterate(st int, prefix []byte, fn func(userKey, payload []byte) bool) {
	p.Iterate(st, prefix, fn)
}
