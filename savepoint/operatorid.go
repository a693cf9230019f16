package savepoint

import (
	"encoding/binary"
	"math/bits"
)

// OperatorIDFromUID returns the operator id Flink derives from a
// user-assigned uid: murmur3_x64_128 with seed 0 over the uid's UTF-8 bytes,
// emitted as h1 then h2, each little-endian (the byte order of Guava's
// HashCode for that function).
func OperatorIDFromUID(uid string) OperatorID {
	h1, h2 := murmur3x64_128([]byte(uid), 0)
	var id OperatorID
	binary.LittleEndian.PutUint64(id[0:8], h1)
	binary.LittleEndian.PutUint64(id[8:16], h2)
	return id
}

const (
	mc1 = 0x87c37b91114253d5
	mc2 = 0x4cf5ad432745937f
)

func murmur3x64_128(data []byte, seed uint64) (uint64, uint64) {
	h1, h2 := seed, seed
	n := len(data)
	i := 0
	for ; i+16 <= n; i += 16 {
		k1 := binary.LittleEndian.Uint64(data[i:])
		k2 := binary.LittleEndian.Uint64(data[i+8:])
		k1 *= mc1
		k1 = bits.RotateLeft64(k1, 31)
		k1 *= mc2
		h1 ^= k1
		h1 = bits.RotateLeft64(h1, 27)
		h1 += h2
		h1 = h1*5 + 0x52dce729
		k2 *= mc2
		k2 = bits.RotateLeft64(k2, 33)
		k2 *= mc1
		h2 ^= k2
		h2 = bits.RotateLeft64(h2, 31)
		h2 += h1
		h2 = h2*5 + 0x38495ab5
	}
	tail := data[i:]
	var k1, k2 uint64
	for j := len(tail) - 1; j >= 8; j-- {
		k2 ^= uint64(tail[j]) << (8 * uint(j-8))
	}
	for j := min(len(tail), 8) - 1; j >= 0; j-- {
		k1 ^= uint64(tail[j]) << (8 * uint(j))
	}
	if len(tail) > 8 {
		k2 *= mc2
		k2 = bits.RotateLeft64(k2, 33)
		k2 *= mc1
		h2 ^= k2
	}
	if len(tail) > 0 {
		k1 *= mc1
		k1 = bits.RotateLeft64(k1, 31)
		k1 *= mc2
		h1 ^= k1
	}
	h1 ^= uint64(n)
	h2 ^= uint64(n)
	h1 += h2
	h2 += h1
	h1 = fmix64(h1)
	h2 = fmix64(h2)
	h1 += h2
	h2 += h1
	return h1, h2
}

func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}
