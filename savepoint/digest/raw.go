package digest

import (
	"crypto/sha256"
	"encoding/binary"
)

// RawEntry is one entry of a native (engine) checkpoint given by its stored
// bytes: the stored key (key group prefix included) and value, the
// multiset count it carries and its TTL timestamp (nil for states without
// TTL).
type RawEntry struct {
	Key, Value []byte
	Count      int64
	Assoc      int64
	TTL        *int64
}

// AddRaw records a native entry. Its hash is SHA-256 of 'K', the key's
// length (4 bytes, big endian), the key, 'V', the value's length and the
// value: it covers the stored bytes, so raw digests compare only with raw
// digests of the same engine encoding.
func (d *Digest) AddRaw(k GroupKey, e RawEntry, ttl TTLCheck) {
	b := make([]byte, 0, 9+len(e.Key)+len(e.Value))
	b = binary.BigEndian.AppendUint32(append(b, 'K'), uint32(len(e.Key)))
	b = append(b, e.Key...)
	b = binary.BigEndian.AppendUint32(append(b, 'V'), uint32(len(e.Value)))
	b = append(b, e.Value...)
	sum := sha256.Sum256(b)
	var ttls []int64
	if e.TTL != nil {
		ttls = []int64{*e.TTL}
	}
	add := func(dd *Digest) {
		g := dd.group(k)
		g.Entries++
		g.Hash.add(sum)
		g.Counts += e.Count
		g.Associations += e.Assoc
		for _, ts := range ttls {
			g.addTTL(ts)
		}
	}
	add(d)
	if d.Live == nil {
		return
	}
	if e.TTL != nil && ttl.Expired(*e.TTL) {
		d.Groups[k].Expired++
		return
	}
	add(d.Live)
}
