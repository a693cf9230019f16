package keygroups

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"time"
)

// Kind is a SQL logical type the RowBuilder can write. The comment after
// each kind lists the Go values the builder accepts for it; nil is NULL for
// every kind.
type Kind uint8

const (
	KindInvalid           Kind = iota
	KindBoolean                // BOOLEAN: bool
	KindTinyInt                // TINYINT: any Go integer in int8 range
	KindSmallInt               // SMALLINT: any Go integer in int16 range
	KindInt                    // INT: any Go integer in int32 range
	KindBigInt                 // BIGINT: any Go integer in int64 range
	KindFloat                  // FLOAT/REAL: float32 or float64 (converted)
	KindDouble                 // DOUBLE: float64 or float32
	KindString                 // CHAR/VARCHAR/STRING: string or []byte holding UTF-8
	KindBytes                  // BINARY/VARBINARY/BYTES: []byte or string
	KindDate                   // DATE: days since 1970-01-01, Go integer in int32 range
	KindTime                   // TIME(p): milliseconds of the day, Go integer in int32 range
	KindTimestamp              // TIMESTAMP(p) WITHOUT TIME ZONE: Timestamp, time.Time (its UTC wall clock) or integer epoch millis
	KindTimestampLTZ           // TIMESTAMP_LTZ(p): Timestamp, time.Time (the instant) or integer epoch millis
	KindDecimal                // DECIMAL(p, s): the UNSCALED value as a Go integer or *big.Int
	KindIntervalYearMonth      // INTERVAL YEAR TO MONTH: months, Go integer in int32 range
	KindIntervalDayTime        // INTERVAL DAY TO SECOND: milliseconds, Go integer in int64 range
	numKinds
)

var kindNames = [numKinds]string{
	KindInvalid: "INVALID", KindBoolean: "BOOLEAN", KindTinyInt: "TINYINT",
	KindSmallInt: "SMALLINT", KindInt: "INT", KindBigInt: "BIGINT",
	KindFloat: "FLOAT", KindDouble: "DOUBLE", KindString: "STRING",
	KindBytes: "BYTES", KindDate: "DATE", KindTime: "TIME",
	KindTimestamp: "TIMESTAMP", KindTimestampLTZ: "TIMESTAMP_LTZ",
	KindDecimal: "DECIMAL", KindIntervalYearMonth: "INTERVAL YEAR TO MONTH",
	KindIntervalDayTime: "INTERVAL DAY TO SECOND",
}

func (k Kind) String() string {
	if k < numKinds {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// FieldType is one field of a row. Precision is used by TIMESTAMP,
// TIMESTAMP_LTZ (0..9) and DECIMAL (1..38, with Scale 0..Precision); other
// kinds ignore both.
type FieldType struct {
	Kind      Kind
	Precision int
	Scale     int
}

// Field types without parameters, and constructors for the others.
var (
	TypeBoolean  = FieldType{Kind: KindBoolean}
	TypeTinyInt  = FieldType{Kind: KindTinyInt}
	TypeSmallInt = FieldType{Kind: KindSmallInt}
	TypeInt      = FieldType{Kind: KindInt}
	TypeBigInt   = FieldType{Kind: KindBigInt}
	TypeFloat    = FieldType{Kind: KindFloat}
	TypeDouble   = FieldType{Kind: KindDouble}
	TypeString   = FieldType{Kind: KindString}
	TypeBytes    = FieldType{Kind: KindBytes}
	TypeDate     = FieldType{Kind: KindDate}
	TypeTime     = FieldType{Kind: KindTime}
)

// TypeTimestamp is TIMESTAMP(precision) WITHOUT TIME ZONE.
func TypeTimestamp(precision int) FieldType {
	return FieldType{Kind: KindTimestamp, Precision: precision}
}

// TypeTimestampLTZ is TIMESTAMP_LTZ(precision).
func TypeTimestampLTZ(precision int) FieldType {
	return FieldType{Kind: KindTimestampLTZ, Precision: precision}
}

// TypeDecimal is DECIMAL(precision, scale).
func TypeDecimal(precision, scale int) FieldType {
	return FieldType{Kind: KindDecimal, Precision: precision, Scale: scale}
}

// String formats t like a SQL type: "BIGINT", "TIMESTAMP(3)", "DECIMAL(10, 2)".
func (t FieldType) String() string {
	switch t.Kind {
	case KindTimestamp, KindTimestampLTZ:
		return fmt.Sprintf("%s(%d)", t.Kind, t.Precision)
	case KindDecimal:
		return fmt.Sprintf("DECIMAL(%d, %d)", t.Precision, t.Scale)
	}
	return t.Kind.String()
}

// Compact reports whether a value of t lives entirely in its 8-byte slot:
// always, except DECIMAL with precision > 18 and timestamps with precision
// > 3 (DecimalData.isCompact, TimestampData.isCompact), and strings/binaries
// longer than 7 bytes (a property of the value, not the type).
func (t FieldType) Compact() bool {
	switch t.Kind {
	case KindDecimal:
		return t.Precision <= 18
	case KindTimestamp, KindTimestampLTZ:
		return t.Precision <= 3
	}
	return true
}

// Validate checks that the type is known and its precision/scale legal.
func (t FieldType) Validate() error {
	switch t.Kind {
	case KindInvalid:
		return errors.New("keygroups: invalid field type")
	case KindTimestamp, KindTimestampLTZ:
		if t.Precision < 0 || t.Precision > 9 {
			return fmt.Errorf("keygroups: %s precision %d not in [0, 9]", t.Kind, t.Precision)
		}
	case KindDecimal:
		if t.Precision < 1 || t.Precision > 38 {
			return fmt.Errorf("keygroups: DECIMAL precision %d not in [1, 38]", t.Precision)
		}
		if t.Scale < 0 || t.Scale > t.Precision {
			return fmt.Errorf("keygroups: DECIMAL scale %d not in [0, %d]", t.Scale, t.Precision)
		}
	default:
		if t.Kind >= numKinds {
			return fmt.Errorf("keygroups: unknown field kind %d", uint8(t.Kind))
		}
	}
	return nil
}

// Timestamp is Flink's TimestampData: milliseconds since the epoch plus the
// nanoseconds within that millisecond (0..999999).
type Timestamp struct {
	Millis      int64
	NanoOfMilli int32
}

// TimestampOf converts t to a Timestamp (floor milliseconds, like
// TimestampData.fromInstant).
func TimestampOf(t time.Time) Timestamp {
	return Timestamp{Millis: t.UnixMilli(), NanoOfMilli: int32(t.Nanosecond() % 1_000_000)}
}

// RowKind is the change flag stored in a row's first byte
// (org.apache.flink.types.RowKind.toByteValue). It is the module's one row
// kind: decoded rows (serde.Row), the engine's row header (rowcodec.Kind)
// and join inputs (recordstore.Input) all carry it.
type RowKind byte

const (
	Insert       RowKind = 0 // +I
	UpdateBefore RowKind = 1 // -U
	UpdateAfter  RowKind = 2 // +U
	Delete       RowKind = 3 // -D
)

func (k RowKind) String() string {
	switch k {
	case Insert:
		return "+I"
	case UpdateBefore:
		return "-U"
	case UpdateAfter:
		return "+U"
	case Delete:
		return "-D"
	}
	return fmt.Sprintf("RowKind(%d)", byte(k))
}

// NullBitsWidth is the size in bytes of a row's header (RowKind byte and
// null bits) for the given arity: BinaryRowData.calculateBitSetWidthInBytes.
func NullBitsWidth(arity int) int { return ((arity + 63 + 8) / 64) * 8 }

// FixedPartSize is the header plus one 8-byte slot per field
// (BinaryRowData.calculateFixPartSizeInBytes): the size of a row whose
// values all fit their slots.
func FixedPartSize(arity int) int { return NullBitsWidth(arity) + 8*arity }

// RowBuilder writes BinaryRowData bytes for rows of a fixed schema. A
// RowBuilder is not safe for concurrent use; it is cheap to create one per
// goroutine.
type RowBuilder struct {
	types []FieldType
	// Kind is written to byte 0 of every row; the zero value is Insert (+I),
	// which is what key rows carry.
	Kind RowKind
}

// NewRowBuilder validates types and returns a builder for rows of them.
func NewRowBuilder(types []FieldType) (*RowBuilder, error) {
	for i, t := range types {
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("field %d: %w", i, err)
		}
	}
	return &RowBuilder{types: append([]FieldType(nil), types...)}, nil
}

// Types returns the row's field types.
func (b *RowBuilder) Types() []FieldType { return append([]FieldType(nil), b.types...) }

// Arity is the number of fields.
func (b *RowBuilder) Arity() int { return len(b.types) }

// BuildRow is a one-shot NewRowBuilder + Build for a +I row.
func BuildRow(types []FieldType, values []any) ([]byte, error) {
	b, err := NewRowBuilder(types)
	if err != nil {
		return nil, err
	}
	return b.Build(values)
}

// Build returns the bytes of the row holding values (one per field; nil is
// NULL). The result is a multiple of 8 bytes long.
func (b *RowBuilder) Build(values []any) ([]byte, error) {
	return b.Append(nil, values)
}

// Append appends the row's bytes to dst. On error dst is returned unchanged
// (same length) with the error, which names the offending field.
func (b *RowBuilder) Append(dst []byte, values []any) ([]byte, error) {
	if len(values) != len(b.types) {
		return dst, fmt.Errorf("keygroups: row has %d fields, got %d values", len(b.types), len(values))
	}
	var w RowWriter
	w.Begin(dst, len(b.types), b.Kind)
	for i, t := range b.types {
		if err := writeField(&w, i, t, values[i]); err != nil {
			return w.Abort(), fmt.Errorf("keygroups: field %d (%s): %w", i, t, err)
		}
		if w.Len() > maxRowSize {
			return w.Abort(), fmt.Errorf("keygroups: row larger than %d bytes", maxRowSize)
		}
	}
	return w.Finish()
}

// writeField converts v to field i's type t and writes it.
func writeField(w *RowWriter, i int, t FieldType, v any) error {
	if v == nil {
		// Generated Flink code writes NULL non-compact decimals and
		// timestamps through writeDecimal/writeTimestamp(null), which keeps
		// their variable-length space (zeroed) and points the slot at it.
		switch {
		case t.Compact():
			w.SetNull(i)
		case t.Kind == KindDecimal:
			w.SetNullReserve(i, 16)
		default:
			w.SetNullReserve(i, 8)
		}
		return nil
	}
	switch t.Kind {
	case KindBoolean:
		x, ok := v.(bool)
		if !ok {
			return typeErr(v)
		}
		w.PutBool(i, x)
	case KindTinyInt:
		x, err := intIn(v, math.MinInt8, math.MaxInt8)
		if err != nil {
			return err
		}
		w.PutInt8(i, int8(x))
	case KindSmallInt:
		x, err := intIn(v, math.MinInt16, math.MaxInt16)
		if err != nil {
			return err
		}
		w.PutInt16(i, int16(x))
	case KindInt, KindDate, KindTime, KindIntervalYearMonth:
		x, err := intIn(v, math.MinInt32, math.MaxInt32)
		if err != nil {
			return err
		}
		w.PutInt32(i, int32(x))
	case KindBigInt, KindIntervalDayTime:
		x, err := intIn(v, math.MinInt64, math.MaxInt64)
		if err != nil {
			return err
		}
		w.PutInt64(i, x)
	case KindFloat:
		switch x := v.(type) {
		case float32:
			w.PutFloat32(i, x)
		case float64:
			w.PutFloat32(i, float32(x))
		default:
			return typeErr(v)
		}
	case KindDouble:
		switch x := v.(type) {
		case float64:
			w.PutFloat64(i, x)
		case float32:
			w.PutFloat64(i, float64(x))
		default:
			return typeErr(v)
		}
	case KindString, KindBytes:
		switch x := v.(type) {
		case string:
			if len(x) > maxRowSize {
				return fmt.Errorf("value of %d bytes too long", len(x))
			}
			w.PutBytes(i, []byte(x))
		case []byte:
			if len(x) > maxRowSize {
				return fmt.Errorf("value of %d bytes too long", len(x))
			}
			w.PutBytes(i, x)
		default:
			return typeErr(v)
		}
	case KindTimestamp, KindTimestampLTZ:
		ts, err := timestampOf(v)
		if err != nil {
			return err
		}
		w.PutTimestamp(i, ts, t.Precision)
	case KindDecimal:
		u, err := unscaledOf(v)
		if err != nil {
			return err
		}
		if digits(u) > t.Precision {
			return fmt.Errorf("unscaled value %s has more than %d digits", u, t.Precision)
		}
		if t.Compact() {
			w.PutDecimal64(i, u.Int64())
		} else {
			w.PutDecimalBytes(i, javaBigIntegerBytes(u))
		}
	default:
		return fmt.Errorf("unsupported kind %s", t.Kind)
	}
	return nil
}

func typeErr(v any) error { return fmt.Errorf("unsupported Go value %T", v) }

// intIn converts any Go integer to int64 and checks [lo, hi].
func intIn(v any, lo, hi int64) (int64, error) {
	var x int64
	switch n := v.(type) {
	case int:
		x = int64(n)
	case int8:
		x = int64(n)
	case int16:
		x = int64(n)
	case int32:
		x = int64(n)
	case int64:
		x = n
	case uint8:
		x = int64(n)
	case uint16:
		x = int64(n)
	case uint32:
		x = int64(n)
	case uint:
		if uint64(n) > math.MaxInt64 {
			return 0, fmt.Errorf("value %d out of range [%d, %d]", n, lo, hi)
		}
		x = int64(n)
	case uint64:
		if n > math.MaxInt64 {
			return 0, fmt.Errorf("value %d out of range [%d, %d]", n, lo, hi)
		}
		x = int64(n)
	default:
		return 0, typeErr(v)
	}
	if x < lo || x > hi {
		return 0, fmt.Errorf("value %d out of range [%d, %d]", x, lo, hi)
	}
	return x, nil
}

func timestampOf(v any) (Timestamp, error) {
	var ts Timestamp
	switch x := v.(type) {
	case Timestamp:
		ts = x
	case *Timestamp:
		if x == nil {
			return ts, errors.New("nil *Timestamp")
		}
		ts = *x
	case time.Time:
		ts = TimestampOf(x)
	default:
		ms, err := intIn(v, math.MinInt64, math.MaxInt64)
		if err != nil {
			return ts, err
		}
		ts.Millis = ms
	}
	if ts.NanoOfMilli < 0 || ts.NanoOfMilli > 999_999 {
		return ts, fmt.Errorf("nano-of-millisecond %d not in [0, 999999]", ts.NanoOfMilli)
	}
	return ts, nil
}

func unscaledOf(v any) (*big.Int, error) {
	switch x := v.(type) {
	case *big.Int:
		if x == nil {
			return nil, errors.New("nil *big.Int")
		}
		return x, nil
	case big.Int:
		return &x, nil
	}
	n, err := intIn(v, math.MinInt64, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	return big.NewInt(n), nil
}

// digits is the number of decimal digits of |u| (0 has 1).
func digits(u *big.Int) int {
	if u.IsInt64() {
		x := u.Int64()
		if x == math.MinInt64 {
			return 19
		}
		if x < 0 {
			x = -x
		}
		d := 1
		for x >= 10 {
			x /= 10
			d++
		}
		return d
	}
	return len(new(big.Int).Abs(u).Text(10))
}

// javaBigIntegerBytes is BigInteger.toByteArray(): minimal big-endian two's
// complement, at least one byte.
func javaBigIntegerBytes(x *big.Int) []byte {
	if x.Sign() >= 0 {
		n := x.BitLen()/8 + 1
		return x.FillBytes(make([]byte, n))
	}
	y := new(big.Int).Neg(x)
	y.Sub(y, big.NewInt(1)) // -x-1 ≥ 0
	n := y.BitLen()/8 + 1
	out := y.FillBytes(make([]byte, n))
	for i := range out {
		out[i] = ^out[i]
	}
	return out
}
