package keygroups

import (
	"encoding/binary"
	"math"
	"math/bits"
	"unicode/utf8"
)

// MurmurHash constants (MurmurHash3_x86_32), shared by MathUtils.murmurHash
// and MurmurHashUtils.
const (
	murmurC1 = 0xcc9e2d51
	murmurC2 = 0x1b873593
	murmurN  = 0xe6546b64

	// RowHashSeed is the seed BinaryRowData.hashCode() uses
	// (MurmurHashUtils.DEFAULT_SEED).
	RowHashSeed = 42
)

func mixK1(k uint32) uint32 {
	k *= murmurC1
	k = bits.RotateLeft32(k, 15)
	return k * murmurC2
}

func mixH1(h, k uint32) uint32 {
	h ^= k
	h = bits.RotateLeft32(h, 13)
	return h*5 + murmurN
}

func fmix32(h uint32) uint32 {
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// MurmurHash is Flink's MathUtils.murmurHash(int): one MurmurHash3 block of
// the 4-byte code with seed 0, finalised, then made non-negative
// (Integer.MIN_VALUE maps to 0).
func MurmurHash(code int32) int32 {
	h := mixH1(0, mixK1(uint32(code)))
	h = fmix32(h ^ 4)
	r := int32(h)
	switch {
	case r >= 0:
		return r
	case r != math.MinInt32:
		return -r
	default:
		return 0
	}
}

// KeyGroupFor maps a key's Java hashCode() to its key group
// (KeyGroupRangeAssignment.computeKeyGroupForKeyHash). It returns -1 when
// maxParallelism is outside [1, MaxParallelismLimit].
func KeyGroupFor(hash int32, maxParallelism int) int {
	if maxParallelism < 1 || maxParallelism > MaxParallelismLimit {
		return -1
	}
	return int(MurmurHash(hash)) % maxParallelism
}

// Key is anything with a Java hashCode(): the Java key classes below, Tuple
// and Row.
type Key interface {
	// HashCode returns the value Java's hashCode() returns for the key.
	HashCode() int32
}

// Assign returns the key group of key (KeyGroupRangeAssignment.assignToKeyGroup),
// or -1 when maxParallelism is invalid.
func Assign(key Key, maxParallelism int) int {
	return KeyGroupFor(hashOf(key), maxParallelism)
}

// hashOf is the hash of a possibly-nil key: Java uses 0 for null fields.
func hashOf(k Key) int32 {
	if k == nil {
		return 0
	}
	return k.HashCode()
}

// Java key classes. Each type's HashCode is the Java boxed class's hashCode().
type (
	Int     int32   // java.lang.Integer
	Long    int64   // java.lang.Long
	Short   int16   // java.lang.Short
	Byte    int8    // java.lang.Byte
	Char    uint16  // java.lang.Character (one UTF-16 code unit)
	Boolean bool    // java.lang.Boolean
	Float   float32 // java.lang.Float
	Double  float64 // java.lang.Double
	String  string  // java.lang.String (held as UTF-8, hashed as UTF-16)
)

func (v Int) HashCode() int32   { return HashInt(int32(v)) }
func (v Long) HashCode() int32  { return HashLong(int64(v)) }
func (v Short) HashCode() int32 { return int32(v) }
func (v Byte) HashCode() int32  { return int32(v) }
func (v Char) HashCode() int32  { return int32(v) }
func (v Boolean) HashCode() int32 {
	return HashBool(bool(v))
}
func (v Float) HashCode() int32  { return HashFloat(float32(v)) }
func (v Double) HashCode() int32 { return HashDouble(float64(v)) }
func (v String) HashCode() int32 { return HashString(string(v)) }

// HashInt is Integer.hashCode().
func HashInt(v int32) int32 { return v }

// HashLong is Long.hashCode(): (int)(v ^ (v >>> 32)).
func HashLong(v int64) int32 {
	u := uint64(v)
	return int32(uint32(u ^ u>>32))
}

// HashBool is Boolean.hashCode(): 1231 for true, 1237 for false.
func HashBool(v bool) int32 {
	if v {
		return 1231
	}
	return 1237
}

// HashFloat is Float.hashCode(): floatToIntBits, which folds every NaN into
// 0x7fc00000.
func HashFloat(v float32) int32 {
	if v != v {
		return 0x7fc00000
	}
	return int32(math.Float32bits(v))
}

// HashDouble is Double.hashCode(): doubleToLongBits (every NaN folded into
// 0x7ff8000000000000), then folded like a Long.
func HashDouble(v float64) int32 {
	if v != v {
		return HashLong(0x7ff8000000000000)
	}
	return HashLong(int64(math.Float64bits(v)))
}

// HashString is String.hashCode() of the Java string holding the same
// characters as the UTF-8 string s: the 31-polynomial over its UTF-16 code
// units (supplementary characters count as two surrogates). Keys should be
// valid UTF-8: each byte of an invalid sequence counts as one U+FFFD, where
// Java's decoder may merge a truncated sequence into a single U+FFFD.
func HashString(s string) int32 {
	var h uint32
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			h = 31*h + uint32(c)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		if r >= 0x10000 {
			r -= 0x10000
			h = 31*h + uint32(0xd800+(r>>10))
			h = 31*h + uint32(0xdc00+(r&0x3ff))
			continue
		}
		h = 31*h + uint32(r)
	}
	return int32(h)
}

// Tuple is a Flink TupleN (org.apache.flink.api.java.tuple) used as a key;
// element i is field fi. A nil element is a null field.
type Tuple []Key

// HashCode is TupleN.hashCode(): hash(f0), then 31*h + hash(fi).
func (t Tuple) HashCode() int32 {
	var h uint32
	for i, f := range t {
		if i == 0 {
			h = uint32(hashOf(f))
			continue
		}
		h = 31*h + uint32(hashOf(f))
	}
	return int32(h)
}

// HashTuple combines field hash codes the way TupleN.hashCode() does. With
// one field it returns that field's hash unchanged; with none it returns 0.
func HashTuple(fieldHashes ...int32) int32 {
	var h uint32
	for i, f := range fieldHashes {
		if i == 0 {
			h = uint32(f)
			continue
		}
		h = 31*h + uint32(f)
	}
	return int32(h)
}

// Row is the bytes of a BinaryRowData (as RowBuilder produces them, or as
// read after the i32 length of a RowDataSerializer record).
type Row []byte

// HashCode is BinaryRowData.hashCode(); see HashRow.
func (r Row) HashCode() int32 { return HashRow(r) }

// HashRow is BinaryRowData.hashCode() (MurmurHashUtils.hashBytesByWords):
// MurmurHash3_x86_32 over row as little-endian 4-byte words, seed 42,
// finalised with h ^= len(row) and fmix32. Flink rows are always a multiple
// of 8 bytes long; for other lengths the last partial word is read as if
// zero-padded (Flink would assert), so the function never panics.
func HashRow(row []byte) int32 {
	h := uint32(RowHashSeed)
	b := row
	for len(b) >= 8 {
		w := binary.LittleEndian.Uint64(b)
		h = mixH1(h, mixK1(uint32(w)))
		h = mixH1(h, mixK1(uint32(w>>32)))
		b = b[8:]
	}
	if len(b) >= 4 {
		h = mixH1(h, mixK1(binary.LittleEndian.Uint32(b)))
		b = b[4:]
	}
	if len(b) > 0 {
		var w [4]byte
		copy(w[:], b)
		h = mixH1(h, mixK1(binary.LittleEndian.Uint32(w[:])))
	}
	return int32(fmix32(h ^ uint32(len(row))))
}
