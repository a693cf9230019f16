package engine

// #include "shim.h"
import "C"

import (
	"bytes"
	"encoding/binary"
	"errors"

	"github.com/linxGnu/grocksdb"
)

// PerRecord is the baseline the state benchmarks measure the bundled
// engine against: the column families, options, value format and slot
// share of the RocksDB backend, but one grocksdb call per access (Get, Put,
// Merge, Delete, an iterator per prefix), as Flink's RocksDB state backend
// does per record. Expired values read as absent. Errors are kept: Err
// returns the first. Not safe for concurrent use.
type PerRecord struct {
	db       *grocksdb.DB
	handles  []*grocksdb.ColumnFamilyHandle
	cfs      []*grocksdb.ColumnFamilyHandle
	opts     []*grocksdb.Options
	ro       *grocksdb.ReadOptions
	wo       *grocksdb.WriteOptions
	states   []StateDesc
	clock    *Clock
	slot     *SlotMemory
	member   *slotMember
	val      []byte
	out      []byte
	list     []byte
	err      error
	accesses int64
}

// OpenPerRecord opens the baseline in dir (which must not hold a database)
// with the options a RocksDB backend would get from ro.
func OpenPerRecord(dir string, states []StateDesc, ro RocksOptions) (*PerRecord, error) {
	ro.defaults()
	nat, err := ro.Slot.acquire()
	if err != nil {
		return nil, err
	}
	clock := ro.Clock
	if clock == nil {
		clock = SystemClock()
	}
	p := &PerRecord{states: states, clock: clock, slot: ro.Slot}
	// The same share of the slot's write buffers as an engine instance.
	p.member = &slotMember{configured: ro.WriteBufferSize}
	ro.WriteBufferSize = ro.Slot.join(p.member, len(states))
	names := []string{"default"}
	var cfo []*grocksdb.Options
	base, err := columnFamilyOptions(ro, 0, 0, nat, nil)
	if err != nil {
		p.Close() // leaves the slot and releases it
		return nil, err
	}
	p.opts = append(p.opts, base)
	cfo = append(cfo, base)
	for _, s := range states {
		o, err := columnFamilyOptions(ro, s.Kind, s.TTL.Milliseconds(), nat, nil)
		if err != nil {
			p.Close()
			return nil, err
		}
		p.opts = append(p.opts, o)
		names = append(names, s.Name)
		cfo = append(cfo, o)
	}
	db, hs, err := grocksdb.OpenDbColumnFamilies(base, dir, names, cfo)
	if err != nil {
		p.Close()
		return nil, err
	}
	p.db, p.handles, p.cfs = db, hs, hs[1:]
	p.ro = grocksdb.NewDefaultReadOptions()
	p.wo = grocksdb.NewDefaultWriteOptions()
	p.wo.DisableWAL(true)
	ccfs := make([]*C.rocksdb_column_family_handle_t, len(p.cfs))
	for i, h := range p.cfs {
		ccfs[i] = nativeCF(h)
	}
	if err := ro.Slot.register(p.member, nativeDB(db), ccfs); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Close releases the database and the slot share.
func (p *PerRecord) Close() {
	if p.member != nil {
		p.slot.leave(p.member, len(p.states))
		p.member = nil
	}
	if p.db != nil {
		for _, h := range p.handles {
			h.Destroy()
		}
		p.db.Close()
		p.ro.Destroy()
		p.wo.Destroy()
		p.db = nil
	}
	for _, o := range p.opts {
		o.Destroy()
	}
	p.opts = nil
	if p.slot != nil {
		p.slot.release()
		p.slot = nil
	}
}

// Get reads key of state st (payload without the TTL prefix; valid until
// the next Get).
func (p *PerRecord) Get(st int, key []byte) ([]byte, bool) {
	p.accesses++
	s, err := p.db.GetCF(p.ro, p.cfs[st], key)
	if err != nil {
		p.err = err
		return nil, false
	}
	defer s.Free()
	if !s.Exists() {
		return nil, false
	}
	ts, pl, ok := splitValue(s.Data())
	if !ok {
		p.err = errors.New("value without TTL prefix")
		return nil, false
	}
	if ttl := p.states[st].TTL.Milliseconds(); ttl > 0 && ts+ttl <= p.clock.Now() {
		return nil, false
	}
	p.out = append(p.out[:0], pl...)
	return p.out, true
}

// Put writes key of state st with the current time.
func (p *PerRecord) Put(st int, key, payload []byte) {
	p.accesses++
	p.val = appendValue(p.val[:0], p.clock.Now(), payload)
	if err := p.db.PutCF(p.wo, p.cfs[st], key, p.val); err != nil {
		p.err = err
	}
}

// Delete removes key of state st.
func (p *PerRecord) Delete(st int, key []byte) {
	if err := p.db.DeleteCF(p.wo, p.cfs[st], key); err != nil {
		p.err = err
	}
}

// ListAdd appends elems to the list at key of state st, as Flink's
// RocksDBListState add/addAll: one RocksDB merge of the new elements, no
// read.
func (p *PerRecord) ListAdd(st int, key []byte, elems [][]byte) {
	p.accesses++
	per := p.states[st].Kind == KindList && p.states[st].TTL > 0
	now := p.clock.Now()
	buf := binary.BigEndian.AppendUint64(p.list[:0], listPrefix(per, now))
	for _, el := range elems {
		buf = appendListElem(buf, per, now, el)
	}
	p.list = buf
	if err := p.db.MergeCF(p.wo, p.cfs[st], key, buf); err != nil {
		p.err = err
	}
}

// Iterate visits the live entries of state st under prefix in key order
// (user key without the prefix, payload) until fn returns false.
func (p *PerRecord) Iterate(st int, prefix []byte, fn func(userKey, payload []byte) bool) {
	ro := grocksdb.NewDefaultReadOptions()
	defer ro.Destroy()
	if up := prefixEnd(prefix); up != nil {
		ro.SetIterateUpperBound(up)
	}
	it := p.db.NewIteratorCF(ro, p.cfs[st])
	defer it.Close()
	now := p.clock.Now()
	ttl := p.states[st].TTL.Milliseconds()
	for it.Seek(prefix); it.Valid(); it.Next() {
		k, v := it.Key(), it.Value()
		ts, pl, ok := splitValue(v.Data())
		cont := true
		if ok && (ttl <= 0 || ts+ttl > now) && bytes.HasPrefix(k.Data(), prefix) {
			cont = fn(k.Data()[len(prefix):], pl)
		}
		k.Free()
		v.Free()
		if !cont {
			break
		}
	}
}

// Accesses counts the Get, Put and ListAdd calls.
func (p *PerRecord) Accesses() int64 { return p.accesses }

// Err returns the first error of an access.
func (p *PerRecord) Err() error { return p.err }
