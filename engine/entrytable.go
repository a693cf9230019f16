package engine

import "hash/maphash"

// entryTable is a bundle's working map from (state, key) to entry: open
// addressing over two flat arrays (entry index and 32 hash bits per slot),
// so a probe touches an entry only when its hash bits match. Entries are kept
// in insertion order for iteration; reset clears it for the next bundle
// without freeing its arrays.
type entryTable struct {
	seed   maphash.Seed
	slots  []uint32 // 1 + index into ents; 0: empty
	tags   []uint32 // high hash bits of the slot's entry
	ents   []*entry
	hashes []uint64 // hash of each of ents (for growing)
}

const entryTableMin = 64

func (t *entryTable) hash(st int, key []byte) uint64 {
	return maphash.Bytes(t.seed, key) ^ (uint64(st)+1)*0x9e3779b97f4a7c15
}

// find returns the entry of (st, key), or nil with the key's hash and the
// empty slot where insert places it.
func (t *entryTable) find(st int, key []byte) (e *entry, h uint64, slot int) {
	if t.slots == nil {
		t.seed = maphash.MakeSeed()
		t.slots = make([]uint32, entryTableMin)
		t.tags = make([]uint32, entryTableMin)
	}
	h = t.hash(st, key)
	mask := len(t.slots) - 1
	tag := uint32(h >> 32)
	for i := int(h) & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return nil, h, i
		}
		if t.tags[i] == tag {
			if e := t.ents[s-1]; e.st == st && e.key == string(key) {
				return e, h, i
			}
		}
	}
}

// insert adds e (absent; e.st and e.key set) at the slot find returned for
// hash h.
func (t *entryTable) insert(h uint64, slot int, e *entry) {
	if 2*(len(t.ents)+1) > len(t.slots) {
		t.grow()
		slot = t.emptySlot(h)
	}
	t.ents = append(t.ents, e)
	t.hashes = append(t.hashes, h)
	t.slots[slot] = uint32(len(t.ents))
	t.tags[slot] = uint32(h >> 32)
}

func (t *entryTable) emptySlot(h uint64) int {
	mask := len(t.slots) - 1
	i := int(h) & mask
	for t.slots[i] != 0 {
		i = (i + 1) & mask
	}
	return i
}

func (t *entryTable) grow() {
	n := 2 * len(t.slots)
	t.slots = make([]uint32, n)
	t.tags = make([]uint32, n)
	for j, h := range t.hashes {
		i := t.emptySlot(h)
		t.slots[i] = uint32(j + 1)
		t.tags[i] = uint32(h >> 32)
	}
}

func (t *entryTable) len() int { return len(t.ents) }

// reset empties the table. Arrays grown for an unusually large bundle
// (over a million slots) are dropped rather than kept.
func (t *entryTable) reset() {
	clear(t.ents)
	t.ents, t.hashes = t.ents[:0], t.hashes[:0]
	if len(t.slots) > 1<<20 {
		t.slots, t.tags = nil, nil
		return
	}
	clear(t.slots)
	clear(t.tags)
}
