package stateexport

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestTextFormatters checks the CSV and JSON formatters against what they
// replace — Arrow's ValueStr through encoding/csv, and encoding/json of
// GetOneForMarshal — on values of every fast-path type, including strings
// with every byte, invalid UTF-8, quotes, separators and leading spaces,
// and timestamps outside years 0..9999.
func TestTextFormatters(t *testing.T) {
	mem := memory.NewGoAllocator()
	rng := rand.New(rand.NewPCG(1, 2))
	strs := []string{"", " x", "\u00a0y", "a,b", `q"uote`, "line\nbreak", "cr\rx", `\.`, "<&>", "\u2028\u2029", "\xff\xfe", "é€😀", "\x00\x01\x1f\x7f", "\t"}
	for c := 0; c < 256; c++ {
		strs = append(strs, "v"+string(rune(c))+string([]byte{byte(c)}))
	}
	fields := []arrow.Field{
		{Name: "i8", Type: arrow.PrimitiveTypes.Int8, Nullable: true},
		{Name: "i16", Type: arrow.PrimitiveTypes.Int16, Nullable: true},
		{Name: "i32", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "i64", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "f32", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
		{Name: "f64", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean, Nullable: true},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "bin", Type: arrow.BinaryTypes.Binary, Nullable: true},
		{Name: "ts_ms_utc", Type: &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"}, Nullable: true},
		{Name: "ts_us", Type: &arrow.TimestampType{Unit: arrow.Microsecond}, Nullable: true},
		{Name: "ts_ns", Type: &arrow.TimestampType{Unit: arrow.Nanosecond}, Nullable: true},
		{Name: "d32", Type: arrow.FixedWidthTypes.Date32, Nullable: true},
	}
	schema := arrow.NewSchema(fields, nil)
	rb := array.NewRecordBuilder(mem, schema)
	defer rb.Release()
	floats := []float64{0, -0.0, 1, -1.5, 1e-7, 1e21, 1e20, 123456789.125, math.MaxFloat64 / 4, math.SmallestNonzeroFloat64, 1.0 / 3}
	n := len(strs) + 200
	for i := 0; i < n; i++ {
		if i%17 == 5 {
			for j := range fields {
				rb.Field(j).AppendNull()
			}
			continue
		}
		rb.Field(0).(*array.Int8Builder).Append(int8(rng.Int()))
		rb.Field(1).(*array.Int16Builder).Append(int16(rng.Int()))
		rb.Field(2).(*array.Int32Builder).Append(int32(rng.Int()))
		rb.Field(3).(*array.Int64Builder).Append(int64(rng.Uint64()))
		f := floats[i%len(floats)] * float64(1+i%3)
		if i%2 == 1 {
			f = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(60)-30))
		}
		f32 := float32(math.MaxFloat32)
		if math.Abs(f) < math.MaxFloat32 {
			f32 = float32(f)
		}
		rb.Field(4).(*array.Float32Builder).Append(f32)
		rb.Field(5).(*array.Float64Builder).Append(f)
		rb.Field(6).(*array.BooleanBuilder).Append(i%3 == 0)
		s := strs[i%len(strs)]
		rb.Field(7).(*array.StringBuilder).Append(s)
		rb.Field(8).(*array.BinaryBuilder).Append([]byte(s))
		ts := int64(rng.Uint64()) >> uint(rng.IntN(30))
		if i%4 == 0 {
			ts = 1_700_000_000_123 + int64(i)
		}
		rb.Field(9).(*array.TimestampBuilder).Append(arrow.Timestamp(ts))
		rb.Field(10).(*array.TimestampBuilder).Append(arrow.Timestamp(ts))
		rb.Field(11).(*array.TimestampBuilder).Append(arrow.Timestamp(ts))
		rb.Field(12).(*array.Date32Builder).Append(arrow.Date32(rng.IntN(40000)))
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()

	var got bytes.Buffer
	cw, err := newCSVWriter(&got, schema)
	if err != nil {
		t.Fatal(err)
	}
	if err := cw.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := cw.Close(); err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	ref := csv.NewWriter(&want)
	hdr := make([]string, len(fields))
	for i, f := range fields {
		hdr[i] = f.Name
	}
	_ = ref.Write(hdr)
	for r := 0; r < int(rec.NumRows()); r++ {
		row := make([]string, len(fields))
		for j, col := range rec.Columns() {
			if !col.IsNull(r) {
				row[j] = col.ValueStr(r)
			}
		}
		_ = ref.Write(row)
	}
	ref.Flush()
	compareLines(t, "CSV", got.String(), want.String())

	got.Reset()
	jw := &jsonWriter{w: nil, schema: schema}
	jw.w = newBufWriter(&got)
	if err := jw.Write(rec); err != nil {
		t.Fatal(err)
	}
	_ = jw.Close()
	want.Reset()
	for r := 0; r < int(rec.NumRows()); r++ {
		want.WriteByte('{')
		for j, col := range rec.Columns() {
			if j > 0 {
				want.WriteByte(',')
			}
			k, _ := json.Marshal(fields[j].Name)
			v, err := json.Marshal(col.GetOneForMarshal(r))
			if err != nil {
				t.Fatal(err)
			}
			want.Write(k)
			want.WriteByte(':')
			want.Write(v)
		}
		want.WriteString("}\n")
	}
	compareLines(t, "JSON", got.String(), want.String())
}

func compareLines(t *testing.T, what, got, want string) {
	t.Helper()
	if got == want {
		return
	}
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			t.Fatalf("%s line %d:\n got %q\nwant %q", what, i, g[i], w[i])
		}
	}
	t.Fatalf("%s: %d lines, want %d", what, len(g), len(w))
}

// TestAppendTimestampMatchesTimeFormat compares the calendar arithmetic
// of appendTimestamp with time.Time.AppendFormat for random instants of
// every unit, with and without the UTC zone, near the epoch, at the
// years 0 and 9999 and beyond them (plain integers).
func TestAppendTimestampMatchesTimeFormat(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	ref := func(v, perSec int64, utc bool) string {
		sec, frac := v/perSec, v%perSec
		if frac < 0 {
			sec, frac = sec-1, frac+perSec
		}
		tm := time.Unix(sec, frac*(1e9/perSec)).UTC()
		if tm.Year() < 0 || tm.Year() > 9999 {
			return strconv.FormatInt(v, 10)
		}
		if utc {
			return tm.Format(time.RFC3339Nano)
		}
		return tm.Format("2006-01-02T15:04:05.999999999")
	}
	const year0, year10000 = -62167219200, 253402300800 // seconds
	for _, perSec := range []int64{1, 1e3, 1e6, 1e9} {
		span := int64(math.MaxInt64)
		if perSec == 1 {
			span = 1 << 40
		}
		vals := []int64{0, -1, 1, perSec - 1, -perSec, year0 * perSec / perSec, (year10000 - 1) * min(perSec, 1e3), 951782400 * perSec}
		if perSec <= 1e6 {
			vals = append(vals, year0*perSec, year0*perSec-1, year10000*perSec, year10000*perSec-1)
		}
		for i := 0; i < 20000; i++ {
			switch i % 3 {
			case 0:
				vals = append(vals, rng.Int64N(span)-span/2)
			case 1:
				vals = append(vals, (rng.Int64N(1<<33)-1<<32)*perSec+rng.Int64N(perSec))
			default:
				vals = append(vals, rng.Int64N(4e9)*perSec-2e9*perSec)
			}
		}
		for _, v := range vals {
			for _, utc := range []bool{false, true} {
				if got, want := string(appendTimestamp(nil, v, perSec, utc)), ref(v, perSec, utc); got != want {
					t.Fatalf("%d units of 1/%d s (utc %v): %s, want %s", v, perSec, utc, got, want)
				}
			}
		}
	}
}
