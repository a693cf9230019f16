// Package keygroupsbench measures key-group assignment: the hash and key
// group of Java keys, tuples and SQL key rows (building the BinaryRowData
// and hashing it), one goroutine, as `sfstate bench keygroups` prints it.
package keygroupsbench

import (
	"fmt"
	"strings"
	"time"

	"github.com/sfstate/sfstate/keygroups"
)

// MaxParallelism is the key-group count every workload assigns into.
const MaxParallelism = 128

// Result is one workload's measurement.
type Result struct {
	Workload  string  `json:"workload"`
	Keys      int     `json:"keys"`
	NsPerKey  float64 `json:"nsPerKey"`
	MKeysPerS float64 `json:"mKeysPerSec"`
	// RowBytes is the size of the SQL row hashed per key (0 for Java keys);
	// MBPerS the row bytes hashed per second.
	RowBytes int     `json:"rowBytes,omitempty"`
	MBPerS   float64 `json:"mbPerSec,omitempty"`
	// Checksum is the sum of the key groups, so the work cannot be skipped
	// and two runs can be compared.
	Checksum    int `json:"checksum"`
	MaxParallel int `json:"maxParallelism"`
}

type workload struct {
	name     string
	rowBytes int
	run      func(n int) int
}

// workloads builds the measured loops.
func workloads() ([]workload, error) {
	strs := make([]string, 1024)
	for i := range strs {
		strs[i] = fmt.Sprintf("customer-%07d", i)
	}
	row56, err := keygroups.BuildRow([]keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeString, keygroups.TypeTimestamp(3), keygroups.TypeDecimal(10, 2)},
		[]any{int64(7), "customer-0000001", keygroups.Timestamp{Millis: 1602288035000}, int64(12345)})
	if err != nil {
		return nil, err
	}
	row272, err := keygroups.BuildRow([]keygroups.FieldType{keygroups.TypeString}, []any{strings.Repeat("y", 256)})
	if err != nil {
		return nil, err
	}
	bigintRow, err := keygroups.NewRowBuilder([]keygroups.FieldType{keygroups.TypeBigInt})
	if err != nil {
		return nil, err
	}
	strRow, err := keygroups.NewRowBuilder([]keygroups.FieldType{keygroups.TypeInt, keygroups.TypeString})
	if err != nil {
		return nil, err
	}
	const maxP = MaxParallelism
	hashOnly := func(row []byte) func(n int) int {
		return func(n int) int {
			s := 0
			for range n {
				s += keygroups.KeyGroupFor(keygroups.HashRow(row), maxP)
			}
			return s
		}
	}
	return []workload{
		{"java Long", 0, func(n int) int {
			s := 0
			for i := range n {
				s += keygroups.KeyGroupFor(keygroups.HashLong(int64(i)), maxP)
			}
			return s
		}},
		{"java String (16 chars)", 0, func(n int) int {
			s := 0
			for i := range n {
				s += keygroups.KeyGroupFor(keygroups.HashString(strs[i&1023]), maxP)
			}
			return s
		}},
		{"Tuple1<Long>", 0, func(n int) int {
			s := 0
			for i := range n {
				s += keygroups.Assign(keygroups.Tuple{keygroups.Long(int64(i))}, maxP)
			}
			return s
		}},
		{"SQL row<bigint> build+hash", 16, func(n int) int {
			s, buf, vals := 0, []byte(nil), []any{int64(0)}
			for i := range n {
				vals[0] = int64(i)
				buf, _ = bigintRow.Append(buf[:0], vals)
				s += keygroups.KeyGroupFor(keygroups.HashRow(buf), maxP)
			}
			return s
		}},
		{"SQL row<int,string> build+hash", 40, func(n int) int {
			s, buf, vals := 0, []byte(nil), []any{int32(0), ""}
			for i := range n {
				vals[0], vals[1] = int32(i), strs[i&1023]
				buf, _ = strRow.Append(buf[:0], vals)
				s += keygroups.KeyGroupFor(keygroups.HashRow(buf), maxP)
			}
			return s
		}},
		{"SQL row hash only", len(row56), hashOnly(row56)},
		{"SQL row hash only", len(row272), hashOnly(row272)},
	}, nil
}

// Run measures every workload over n keys (after a warm-up of up to
// 10,000).
func Run(n int) ([]Result, error) {
	if n <= 0 {
		return nil, fmt.Errorf("keygroupsbench: %d keys", n)
	}
	wls, err := workloads()
	if err != nil {
		return nil, err
	}
	var res []Result
	for _, wl := range wls {
		wl.run(min(n, 10_000))
		start := time.Now()
		sum := wl.run(n)
		el := time.Since(start)
		r := Result{Workload: wl.name, Keys: n, RowBytes: wl.rowBytes, Checksum: sum, MaxParallel: MaxParallelism}
		r.NsPerKey = float64(el.Nanoseconds()) / float64(n)
		if el > 0 {
			r.MKeysPerS = float64(n) / el.Seconds() / 1e6
			if wl.rowBytes > 0 {
				r.MBPerS = float64(n*wl.rowBytes) / el.Seconds() / 1e6
			}
		}
		res = append(res, r)
	}
	return res, nil
}
