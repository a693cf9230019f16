package verify

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

// AddRaw records a native entry. Its hash covers the stored bytes, so raw
// digests compare only with raw digests of the same engine encoding.
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
		g := dd.Groups[k]
		if g == nil {
			g = newGroup()
			dd.Groups[k] = g
		}
		g.Entries++
		g.Hash.add(sum)
		g.Counts += e.Count
		g.Associations += e.Assoc
		for _, ts := range ttls {
			g.TTLEntries++
			g.TTLMin, g.TTLMax = min(g.TTLMin, ts), max(g.TTLMax, ts)
			var tb [8]byte
			binary.BigEndian.PutUint64(tb[:], uint64(ts))
			g.TTLHash.add(sha256.Sum256(tb[:]))
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

// TargetDigest is a target digested outside Run (native checkpoints).
type TargetDigest struct {
	// Name overrides Target.Name() in the report.
	Name   string
	Target Target
	Digest *Digest
	Err    error
}

// BuildReport compares targets digested elsewhere with the source digest
// (its live part when a TTL is given) and returns the report, without
// decoded samples.
func BuildReport(source string, o Options, check *CheckResult, src *Digest, targets []TargetDigest) *Report {
	r := &Report{Source: source, Shard: o.Shard.String(), ShardIndex: o.Shard.Index, ShardCount: o.Shard.Count, Check: check, Digest: src}
	if o.TTL.TTLMillis > 0 {
		t := o.TTL
		r.TTL = &t
	}
	want := src
	if src.Live != nil {
		want = src.Live
	}
	for _, t := range targets {
		tr := TargetResult{Name: t.Target.Name(), Backend: t.Target.Backend, Parallelism: t.Target.Parallelism, Digest: t.Digest}
		if t.Name != "" {
			tr.Name = t.Name
		}
		if t.Err != nil {
			tr.Error = t.Err.Error()
		} else {
			tr.Differences = Compare(want, t.Digest)
			if max := o.MaxDifferences; max > 0 && len(tr.Differences) > max {
				tr.MoreDifferences = len(tr.Differences) - max
				tr.Differences = tr.Differences[:max]
			}
		}
		r.Targets = append(r.Targets, tr)
	}
	r.finish()
	return r
}
