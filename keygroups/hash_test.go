package keygroups

import (
	"math"
	"testing"
)

// Key groups read from real Flink savepoints (fixtures MANIFEST §2.1, §2.2).
func TestKeyGroupsFromFlinkSavepoints(t *testing.T) {
	// DataStream job keyed by Tuple1<Long>, maxParallelism 4.
	for key, want := range map[int64]int{0: 2, 1: 2, 2: 3, 3: 1} {
		if got := Assign(Tuple{Long(key)}, 4); got != want {
			t.Errorf("Tuple1<Long>(%d) at maxP 4: kg %d, want %d", key, got, want)
		}
	}
	// Tuple1<Integer> keys 0..9, maxParallelism 128.
	wantInt := []int{94, 86, 127, 113, 7, 126, 18, 113, 15, 51}
	for key, want := range wantInt {
		if got := Assign(Tuple{Int(int32(key))}, 128); got != want {
			t.Errorf("Tuple1<Integer>(%d) at maxP 128: kg %d, want %d", key, got, want)
		}
	}
}

func TestSQLKeyRowsFromFlinkSavepoints(t *testing.T) {
	for _, tc := range []struct {
		name   string
		types  []FieldType
		values []any
		want   int
	}{
		{"(BIGINT 2)", []FieldType{TypeBigInt}, []any{int64(2)}, 93},
		{"(BIGINT 1)", []FieldType{TypeBigInt}, []any{int64(1)}, 94},
		{"(INT NULL)", []FieldType{TypeInt}, []any{nil}, 99},
		{"(STRING NULL)", []FieldType{TypeString}, []any{nil}, 99},
		{"(STRING pen)", []FieldType{TypeString}, []any{"pen"}, 3},
		{"(STRING apple)", []FieldType{TypeString}, []any{"apple"}, 32},
		{"(STRING b)", []FieldType{TypeString}, []any{"b"}, 11},
		{"(INT 7)", []FieldType{TypeInt}, []any{int32(7)}, 4},
		{"(INT 3)", []FieldType{TypeInt}, []any{int32(3)}, 112},
	} {
		row, err := BuildRow(tc.types, tc.values)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := Assign(Row(row), 128); got != tc.want {
			t.Errorf("%s: kg %d, want %d (row % x)", tc.name, got, tc.want, row)
		}
	}
}

// murmurRef is an independent transcription of MathUtils.murmurHash using
// signed Java-style arithmetic, to cross-check the unsigned implementation.
func murmurRef(code int32) int32 {
	rotl := func(x int32, r uint) int32 { return int32(uint32(x)<<r | uint32(x)>>(32-r)) }
	c1, c2 := int32(-862048943), int32(461845907) // 0xcc9e2d51, 0x1b873593
	code *= c1
	code = rotl(code, 15)
	code *= c2
	code = rotl(code, 13)
	code = code*5 + int32(-430675100) // 0xe6546b64
	code ^= 4
	code ^= int32(uint32(code) >> 16)
	code *= int32(-2048144789) // 0x85ebca6b
	code ^= int32(uint32(code) >> 13)
	code *= int32(-1028477387) // 0xc2b2ae35
	code ^= int32(uint32(code) >> 16)
	if code >= 0 {
		return code
	}
	if code != math.MinInt32 {
		return -code
	}
	return 0
}

func TestMurmurHashMatchesReference(t *testing.T) {
	inputs := []int32{0, 1, -1, 2, 42, math.MaxInt32, math.MinInt32, 1231, 1237, 0x7fc00000}
	x := uint32(12345)
	for range 5000 {
		x = x*1664525 + 1013904223
		inputs = append(inputs, int32(x))
	}
	for _, c := range inputs {
		got, want := MurmurHash(c), murmurRef(c)
		if got != want {
			t.Fatalf("MurmurHash(%d) = %d, want %d", c, got, want)
		}
		if got < 0 {
			t.Fatalf("MurmurHash(%d) = %d is negative", c, got)
		}
	}
}

func TestJavaHashCodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  int32
		want int32
	}{
		// Values as java.lang.*.hashCode() returns them.
		{"Long(0)", Long(0).HashCode(), 0},
		{"Long(-1)", Long(-1).HashCode(), 0},
		{"Long(1<<32)", Long(1 << 32).HashCode(), 1},
		{"Long(MaxInt64)", Long(math.MaxInt64).HashCode(), math.MinInt32},
		{"Long(-2)", Long(-2).HashCode(), 1},
		{"Integer(-5)", Int(-5).HashCode(), -5},
		{"Boolean(true)", Boolean(true).HashCode(), 1231},
		{"Boolean(false)", Boolean(false).HashCode(), 1237},
		{"Short(-3)", Short(-3).HashCode(), -3},
		{"Byte(-128)", Byte(-128).HashCode(), -128},
		{"Character('a')", Char('a').HashCode(), 97},
		{`""`, String("").HashCode(), 0},
		{`"a"`, String("a").HashCode(), 97},
		{`"key"`, String("key").HashCode(), 106079},
		{`"hello"`, String("hello").HashCode(), 99162322},
		{`"Hello World"`, String("Hello World").HashCode(), -862545276},
		// é is one UTF-16 unit (0xE9); 😀 (U+1F600) is the pair D83D DE00.
		{`"é"`, String("é").HashCode(), 0xe9},
		{`"😀"`, String("😀").HashCode(), 0xd83d*31 + 0xde00},
		{`"a😀b"`, String("a😀b").HashCode(), int32(((97*31+0xd83d)*31+0xde00)*31 + 98)},
		{"invalid UTF-8", String("\xff").HashCode(), 0xfffd},
		{"Float(1.0)", Float(1).HashCode(), 0x3f800000},
		{"Float(NaN)", Float(float32(math.NaN())).HashCode(), 0x7fc00000},
		{"Double(1.0)", Double(1).HashCode(), 0x3ff00000},
		{"Double(-0.0)", Double(math.Copysign(0, -1)).HashCode(), math.MinInt32},
		{"Double(NaN)", Double(math.NaN()).HashCode(), 0x7ff80000},
		{"Tuple0", Tuple{}.HashCode(), 0},
		{"Tuple1(Long 5)", Tuple{Long(5)}.HashCode(), 5},
		{"Tuple2(1, 2)", Tuple{Int(1), Int(2)}.HashCode(), 31*1 + 2},
		{"Tuple3(1, null, 3)", Tuple{Int(1), nil, Int(3)}.HashCode(), (31*1+0)*31 + 3},
		{`Tuple2("a", true)`, Tuple{String("a"), Boolean(true)}.HashCode(), 97*31 + 1231},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: hash %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}

func TestHashStringMatchesUTF16Polynomial(t *testing.T) {
	for _, s := range []string{"", "pen", "Grüße", "日本語", "𝄞 clef", "mixed 😀 and ascii", "\x00\x01"} {
		var h int32
		for _, u := range utf16Units(s) {
			h = 31*h + int32(u)
		}
		if got := HashString(s); got != h {
			t.Errorf("HashString(%q) = %d, want %d", s, got, h)
		}
	}
}

func utf16Units(s string) []uint16 {
	var out []uint16
	for _, r := range s {
		if r >= 0x10000 {
			r -= 0x10000
			out = append(out, uint16(0xd800+(r>>10)), uint16(0xdc00+(r&0x3ff)))
			continue
		}
		out = append(out, uint16(r))
	}
	return out
}

func TestHashRowKnownVectors(t *testing.T) {
	// Standard MurmurHash3_x86_32 of the 4 bytes 00 00 00 00 with seed 42
	// and length 4, computed independently from the published algorithm.
	got := HashRow([]byte{0, 0, 0, 0})
	h := uint32(42)
	k := uint32(0)
	k *= 0xcc9e2d51
	k = k<<15 | k>>17
	k *= 0x1b873593
	h ^= k
	h = h<<13 | h>>19
	h = h*5 + 0xe6546b64
	h ^= 4
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	if got != int32(h) {
		t.Fatalf("HashRow(0000) = %#x, want %#x", uint32(got), h)
	}
	// A trailing partial word hashes as zero-padded, never panics, and
	// differs from the aligned input because the length is mixed in.
	if HashRow([]byte{1, 2, 3, 4, 5}) == HashRow([]byte{1, 2, 3, 4, 5, 0, 0, 0}) {
		t.Fatal("length not mixed into row hash")
	}
	_ = HashRow(nil)
}

func TestKeyGroupForInvalidMaxParallelism(t *testing.T) {
	for _, m := range []int{0, -1, MaxParallelismLimit + 1} {
		if got := KeyGroupFor(1, m); got != -1 {
			t.Errorf("KeyGroupFor(1, %d) = %d, want -1", m, got)
		}
	}
	if got := KeyGroupFor(1, MaxParallelismLimit); got < 0 || got >= MaxParallelismLimit {
		t.Errorf("KeyGroupFor at the limit: %d", got)
	}
}

// hashRowRef is the plain word-by-word form of hashBytesByWords.
func hashRowRef(row []byte) int32 {
	padded := append([]byte(nil), row...)
	for len(padded)%4 != 0 {
		padded = append(padded, 0)
	}
	h := uint32(RowHashSeed)
	for i := 0; i < len(padded); i += 4 {
		k := uint32(padded[i]) | uint32(padded[i+1])<<8 | uint32(padded[i+2])<<16 | uint32(padded[i+3])<<24
		h = mixH1(h, mixK1(k))
	}
	return int32(fmix32(h ^ uint32(len(row))))
}

func TestHashRowAllLengths(t *testing.T) {
	buf := make([]byte, 80)
	for i := range buf {
		buf[i] = byte(i*37 + 11)
	}
	for n := 0; n <= len(buf); n++ {
		if got, want := HashRow(buf[:n]), hashRowRef(buf[:n]); got != want {
			t.Fatalf("len %d: %#x, want %#x", n, got, want)
		}
	}
}
