package serde

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"unicode/utf16"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint/internal/binfmt"
	"github.com/sfstate/sfstate/savepoint/javaser"
)

// Decoder decodes the data of one serializer. Errors are recorded in the
// Decbuf (sticky, with offsets); callers check d.Err() after decoding.
type Decoder interface {
	// Decode reads one value.
	Decode(d *binfmt.Decbuf) Value
	// Skip advances over one value without building it.
	Skip(d *binfmt.Decbuf)
	// Len is the serializer's declared fixed length (Flink's getLength()),
	// or -1 for variable-length data. VoidNamespace declares 0 although it
	// writes one byte, exactly like Flink.
	Len() int
	// Snapshot is the snapshot the decoder was built from.
	Snapshot() *Snapshot
	// Supported is false for raw decoders (no data format implemented):
	// they consume everything that remains and return *Raw.
	Supported() bool
}

type kind int

const (
	kRaw kind = iota
	kInt
	kLong
	kBool
	kShort
	kByte
	kDouble
	kFloat
	kChar
	kString
	kStringData
	kBytes
	kVoid
	kTimeWindow
	kGlobalWindow
	kCountWindow
	kJava
	kTuple
	kTTL
	kList
	kMap
	kTimer
	kRowData
	kBinaryRow
	kDecimal
	kTimestamp
	kLinkedList
	kRawValue
	kPojo
	kArrayData
	kMapData
	// kinds of builtin.go
	kEventID
	kDewey
	kNodeID
	kSBEdge
	kSBNode
	kLockable
	kNFAState
	kStreamElement
	kEnum
	kEither
	kNullable
	kOption
	kCaseClass
	kJavaRow
	kGenericArray
	kPrimArray
	kStringValue
	kAvro
)

type decoder struct {
	k      kind
	snap   *Snapshot
	kids   []*decoder
	types  []*LogicalType
	fast   []fieldKind // per row field: the common scalar kinds, else fkOther
	n      int         // declared length
	prec   int
	scale  int
	mask   bool
	nwords int  // BinaryRowData: null bit-set width in bytes
	elem   kind // primitive array element
	avro   *avroNode
	sup    bool
}

const (
	maxCollection = 1 << 28
	tsSignFlip    = math.MinInt64
	maxZeroWidth  = 1 << 16
)

// NewDecoder builds the data decoder for a snapshot. It never fails:
// serializers without a data decoder get a raw decoder (Supported() false).
func NewDecoder(s *Snapshot) Decoder {
	d := build(s, 0)
	d.markSupported()
	return d
}

func (dc *decoder) markSupported() bool {
	sup := dc.k != kRaw
	for _, k := range dc.kids {
		if !k.markSupported() {
			sup = false
		}
	}
	dc.sup = sup
	return sup
}

func build(s *Snapshot, depth int) *decoder {
	dc := &decoder{k: kRaw, snap: s, n: -1}
	if s == nil || depth > maxSnapshotDepth {
		return dc
	}
	if s.LegacyOf != "" {
		// A legacy composite config snapshot: its serializer writes what
		// the current one does.
		c := *s
		c.Class, c.LegacyOf = s.LegacyOf, ""
		d := build(&c, depth+1)
		d.snap = s
		return d
	}
	kids := func() []*decoder {
		out := make([]*decoder, len(s.Nested))
		for i, n := range s.Nested {
			out[i] = build(n, depth+1)
		}
		return out
	}
	fixed := map[string]struct {
		k kind
		n int
	}{
		ClassInt: {kInt, 4}, ClassLong: {kLong, 8}, ClassBoolean: {kBool, 1}, ClassShort: {kShort, 2},
		ClassByte: {kByte, 1}, ClassDouble: {kDouble, 8}, ClassFloat: {kFloat, 4}, ClassChar: {kChar, 2},
		ClassString: {kString, -1}, ClassStringData: {kStringData, -1}, ClassBytes: {kBytes, -1},
		ClassVoid: {kVoid, 0}, ClassTimeWindow: {kTimeWindow, 16}, ClassTableTW: {kTimeWindow, 16},
		ClassGlobalWin: {kGlobalWindow, 0}, ClassCountWindow: {kCountWindow, 8}, ClassJava: {kJava, -1},
	}
	if f, ok := fixed[s.Class]; ok {
		dc.k, dc.n = f.k, f.n
		return dc
	}
	if buildBuiltin(dc, s, depth) {
		return dc
	}
	switch s.Class {
	case ClassTuple, ClassTTL, ClassTimer:
		dc.kids = kids()
		switch s.Class {
		case ClassTuple:
			dc.k = kTuple
		case ClassTTL:
			dc.k = kTTL
		default:
			dc.k = kTimer
		}
		sum := 0
		if dc.k == kTimer {
			sum = 8
		}
		for _, c := range dc.kids {
			if c.n < 0 {
				sum = -1
				break
			}
			sum += c.n
		}
		if dc.k == kTTL && len(dc.kids) == 2 && dc.kids[1].n < 0 {
			sum = -1
		}
		dc.n = sum
		if (dc.k == kTTL || dc.k == kTimer) && len(dc.kids) != 2 {
			dc.k = kRaw
		}
	case ClassList, ClassMap, ClassSortedMap:
		dc.kids = kids()
		dc.k = kList
		if s.Class != ClassList {
			// SortedMapSerializer shares MapSerializer's format.
			dc.k = kMap
		}
		if len(dc.kids) != map[bool]int{true: 1, false: 2}[dc.k == kList] {
			dc.k = kRaw
		}
	case ClassLinkedList:
		dc.kids = kids()
		dc.k = kLinkedList
		dc.mask = s.HasNullMask
	case ClassExternal, ClassTTLAware:
		if len(s.Nested) == 1 {
			return build(s.Nested[0], depth+1)
		}
	case ClassRowData:
		dc.k = kRowData
		dc.types = s.Types
		dc.fast = fieldKinds(s.Types)
		dc.kids = kids()
		dc.nwords = keygroups.NullBitsWidth(len(s.Types))
	case ClassBinaryRow:
		dc.k = kBinaryRow
		dc.nwords = keygroups.NullBitsWidth(int(s.NumFields))
	case ClassDecimal:
		dc.k, dc.prec, dc.scale = kDecimal, int(s.Precision), int(s.Scale)
	case ClassTimestamp:
		dc.k, dc.prec = kTimestamp, int(s.Precision)
	case ClassRawValue:
		dc.k = kRawValue
	case ClassPojo:
		dc.k = kPojo
		dc.kids = kids()
	case ClassArrayData:
		if len(s.Types) == 1 {
			dc.k, dc.types = kArrayData, s.Types
		}
	case ClassMapData:
		if len(s.Types) == 2 {
			dc.k, dc.types = kMapData, s.Types
		}
	}
	return dc
}

func (dc *decoder) Len() int            { return dc.n }
func (dc *decoder) Snapshot() *Snapshot { return dc.snap }
func (dc *decoder) Supported() bool     { return dc.sup }

func (dc *decoder) class() string {
	if dc.snap == nil {
		return "<none>"
	}
	return dc.snap.Class
}

// Skip implements Decoder.
func (dc *decoder) Skip(d *binfmt.Decbuf) {
	switch dc.k {
	case kInt, kFloat:
		d.Skip(4)
	case kLong, kDouble, kCountWindow:
		d.Skip(8)
	case kBool, kByte, kVoid, kGlobalWindow:
		d.Skip(1)
	case kShort, kChar:
		d.Skip(2)
	case kTimeWindow:
		d.Skip(16)
	case kStringData, kBytes, kRawValue:
		n := d.Count("byte length", math.MaxInt32, 1)
		d.Skip(n)
	case kRowData, kBinaryRow, kArrayData, kMapData:
		n := d.Count("row size", math.MaxInt32, 1)
		d.Skip(n)
	case kTuple, kTTL, kTimer:
		if dc.k == kTimer {
			d.Skip(8)
		} else if dc.k == kTTL {
			d.Skip(8)
			dc.kids[1].Skip(d)
			return
		}
		for _, k := range dc.kids {
			k.Skip(d)
		}
	default:
		dc.Decode(d)
	}
}

// Decode implements Decoder.
func (dc *decoder) Decode(d *binfmt.Decbuf) Value {
	if d.Err() != nil {
		return nil
	}
	switch dc.k {
	case kInt:
		return arenaOf(d).int32(d.I32())
	case kLong:
		return arenaOf(d).int64(d.I64())
	case kBool:
		return d.Bool()
	case kShort:
		return d.I16()
	case kByte:
		return int8(d.U8())
	case kDouble:
		return d.F64()
	case kFloat:
		return d.F32()
	case kChar:
		return Char(d.U16())
	case kString:
		s, ok := readStringValue(d)
		if !ok {
			return nil
		}
		return s
	case kStringData:
		n := d.Count("string byte length", math.MaxInt32, 1)
		return arenaOf(d).str(d.Bytes(n))
	case kBytes:
		n := d.Count("byte array length", math.MaxInt32, 1)
		b := d.Bytes(n)
		if d.Err() != nil {
			return nil
		}
		return append([]byte(nil), b...)
	case kVoid:
		at := d.Offset()
		if b := d.U8(); b != 0 && d.Err() == nil {
			d.Fail(&binfmt.OffsetError{Offset: at, Err: fmt.Errorf("%w: VoidNamespace byte 0x%02x", binfmt.ErrCorrupt, b)})
		}
		return Void{}
	case kGlobalWindow:
		d.U8()
		return GlobalWindow{}
	case kTimeWindow:
		return TimeWindow{Start: d.I64(), End: d.I64()}
	case kCountWindow:
		return CountWindow{ID: d.I64()}
	case kJava:
		return decodeJava(d)
	case kTuple:
		out := make(Tuple, len(dc.kids))
		for i, k := range dc.kids {
			out[i] = k.Decode(d)
		}
		return out
	case kTTL:
		ts := d.I64()
		t := arenaOf(d).ttl()
		t.LastAccess = ts
		t.Value = dc.kids[1].Decode(d)
		return t
	case kTimer:
		ts := d.I64() ^ tsSignFlip
		return &Timer{Timestamp: ts, Key: dc.kids[0].Decode(d), Namespace: dc.kids[1].Decode(d)}
	case kList:
		n := d.Count("list size", maxCollection, 0)
		a := arenaOf(d)
		out := a.values(min(n, d.Len()))
		for i := 0; i < n && d.Err() == nil; i++ {
			before := d.Pos
			out = append(out, dc.kids[0].Decode(d))
			if d.Pos == before && n > d.Len()+maxZeroWidth {
				// Zero-width elements: do not let a hostile count build a
				// huge list out of nothing.
				d.Failf("list of %d zero-width elements", n)
				return nil
			}
		}
		return a.list(out)
	case kMap:
		n := d.Count("map size", maxCollection, 1)
		out := make(Map, 0, min(n, d.Len()))
		for i := 0; i < n && d.Err() == nil; i++ {
			k := dc.kids[0].Decode(d)
			var v Value
			if !d.Bool() {
				v = dc.kids[1].Decode(d)
			}
			out = append(out, MapEntry{Key: k, Value: v})
		}
		return out
	case kLinkedList:
		n := d.Count("list size", maxCollection, 0)
		var nulls []bool
		if dc.mask {
			mb := d.Bytes((n + 7) / 8)
			if d.Err() != nil {
				return nil
			}
			nulls = make([]bool, n)
			for i := range nulls {
				nulls[i] = mb[i/8]&(0x80>>(i%8)) != 0
			}
		}
		out := make(List, 0, min(n, d.Len()+1))
		for i := 0; i < n && d.Err() == nil; i++ {
			if nulls != nil && nulls[i] {
				out = append(out, nil)
				continue
			}
			before := d.Pos
			out = append(out, dc.kids[0].Decode(d))
			if d.Pos == before && n > d.Len()+maxZeroWidth {
				d.Failf("list of %d zero-width elements", n)
				return nil
			}
		}
		return out
	case kRowData, kBinaryRow:
		at := d.Offset()
		n := d.Count("row size", math.MaxInt32, 1)
		b := d.Bytes(n)
		if d.Err() != nil {
			return nil
		}
		r, err := dc.decodeRow(b, at+4, 0, arenaOf(d))
		if err != nil {
			d.Fail(err)
			return nil
		}
		return r
	case kDecimal:
		if dc.prec <= 18 {
			return Decimal{Unscaled: big.NewInt(d.I64()), Scale: dc.scale}
		}
		n := d.Count("decimal byte length", 1<<16, 1)
		b := d.Bytes(n)
		if d.Err() != nil {
			return nil
		}
		return Decimal{Unscaled: signedBig(b), Scale: dc.scale}
	case kTimestamp:
		t := Timestamp{Millis: d.I64(), Precision: dc.prec}
		if dc.prec > 3 {
			t.NanoOfMill = d.I32()
		}
		return t
	case kPojo:
		return dc.decodePojo(d)
	case kArrayData, kMapData:
		at := d.Offset()
		n := d.Count("binary array/map size", math.MaxInt32, 1)
		b := d.Bytes(n)
		if d.Err() != nil {
			return nil
		}
		var v Value
		var err error
		if dc.k == kArrayData {
			v, err = decodeArray(dc.types[0], b, at+4, 0)
		} else {
			v, err = decodeMap(dc.types[0], dc.types[1], b, at+4, 0)
		}
		if err != nil {
			d.Fail(err)
			return nil
		}
		return v
	case kRawValue:
		n := d.Count("raw value length", math.MaxInt32, 1)
		b := d.Bytes(n)
		if d.Err() != nil {
			return nil
		}
		return &Raw{Serializer: dc.class(), Bytes: append([]byte(nil), b...)}
	case kEventID, kDewey, kNodeID, kSBEdge, kSBNode, kLockable, kNFAState, kStreamElement,
		kEnum, kEither, kNullable, kOption, kCaseClass, kJavaRow, kGenericArray, kPrimArray, kStringValue, kAvro:
		v := dc.decodeBuiltin(d)
		if d.Err() != nil {
			return nil
		}
		return v
	default:
		b := d.Bytes(d.Len())
		return &Raw{Serializer: dc.class(), Bytes: append([]byte(nil), b...)}
	}
}

// POJO flags (PojoSerializer; wire format).
const (
	pojoIsNull           = 0x01
	pojoNoSubclass       = 0x02
	pojoIsSubclass       = 0x04
	pojoIsTaggedSubclass = 0x08
)

// decodePojo reads PojoSerializer data: a flags byte, then for the POJO's
// own class one (isNull, value) pair per field. Subclass instances are
// written by serializers the snapshot does not describe; the rest of the
// data is then returned raw.
func (dc *decoder) decodePojo(d *binfmt.Decbuf) Value {
	at := d.Pos
	flags := d.U8()
	if d.Err() != nil {
		return nil
	}
	if flags&pojoIsNull != 0 {
		return nil
	}
	if flags&pojoNoSubclass == 0 {
		d.Pos = at
		return &Raw{Serializer: dc.class(), Bytes: append([]byte(nil), d.Bytes(d.Len())...)}
	}
	p := &Pojo{Class: dc.snap.TypeClass, Fields: make([]PojoField, len(dc.kids))}
	for i, k := range dc.kids {
		p.Fields[i].Name = dc.snap.FieldNames[i]
		if d.Bool() {
			continue
		}
		p.Fields[i].Value = k.Decode(d)
	}
	return p
}

func signedBig(b []byte) *big.Int {
	v := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return v
}

func decodeJava(d *binfmt.Decbuf) Value {
	js, n, err := javaser.ParseOne(d.B[d.Pos:], d.Offset())
	if err != nil {
		d.Fail(err)
		return nil
	}
	d.Pos += n
	switch v := js.First().(type) {
	case string:
		return v
	case nil:
		return nil
	case *javaser.Object:
		return &Raw{Serializer: "java:" + v.ClassName(), Bytes: append([]byte(nil), js.Raw...)}
	}
	return &Raw{Serializer: "java", Bytes: append([]byte(nil), js.Raw...)}
}

// readStringValue reads Flink's StringValue encoding: varint (len+1), then
// each UTF-16 unit as a varint; 0 means null.
func readStringValue(d *binfmt.Decbuf) (any, bool) {
	at := d.Offset()
	l, ok := readCharVarint(d)
	if !ok {
		return nil, false
	}
	if l == 0 {
		return nil, true
	}
	n := int(l - 1)
	if n > d.Len() {
		d.Fail(&binfmt.OffsetError{Offset: at, Err: fmt.Errorf("%w: string of %d chars, %d bytes left", binfmt.ErrTruncated, n, d.Len())})
		return nil, false
	}
	// Fast path: all ASCII.
	b := d.B[d.Pos:]
	ascii := true
	for i := 0; i < n; i++ {
		if b[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		d.Pos += n
		return arenaOf(d).string(b[:n]), true
	}
	units := make([]uint16, n)
	for i := range units {
		c, ok := readCharVarint(d)
		if !ok {
			return nil, false
		}
		if c > 0xFFFF {
			d.Failf("string char 0x%x out of range", c)
			return nil, false
		}
		units[i] = uint16(c)
	}
	return string(utf16.Decode(units)), true
}

func readCharVarint(d *binfmt.Decbuf) (uint32, bool) {
	var v uint32
	for shift := uint(0); shift < 35; shift += 7 {
		c := d.U8()
		if d.Err() != nil {
			return 0, false
		}
		v |= uint32(c&0x7F) << shift
		if c < 0x80 {
			return v, true
		}
	}
	d.Failf("string varint longer than 5 bytes")
	return 0, false
}

// decodeRow decodes BinaryRowData bytes b whose first byte is at absolute
// offset base.
func (dc *decoder) decodeRow(b []byte, base int64, depth int, a *Arena) (*Row, error) {
	if depth > maxSnapshotDepth {
		return nil, &binfmt.OffsetError{Offset: base, Err: fmt.Errorf("%w: rows nested deeper than %d", binfmt.ErrCorrupt, maxSnapshotDepth)}
	}
	arity := len(dc.types)
	if dc.k == kBinaryRow {
		arity = int(dc.snap.NumFields)
	}
	w := keygroups.NullBitsWidth(arity)
	if int64(len(b)) < int64(w)+8*int64(arity) {
		return nil, &binfmt.OffsetError{Offset: base, Err: fmt.Errorf("%w: row of %d fields needs %d bytes, has %d", binfmt.ErrCorrupt, arity, w+8*arity, len(b))}
	}
	if b[0] > 3 {
		return nil, &binfmt.OffsetError{Offset: base, Err: fmt.Errorf("%w: row kind byte 0x%02x", binfmt.ErrCorrupt, b[0])}
	}
	r := a.row(keygroups.RowKind(b[0]), arity)
	if dc.k == kRowData && len(dc.fast) == arity {
		// The common case: fields of the scalar kinds decoded inline.
		fields := r.Fields[:arity]
		for i, k := range dc.fast {
			bit := i + 8
			if b[bit>>3]&(1<<(bit&7)) != 0 {
				fields[i] = nil // null (a recycled row holds an old value)
				continue
			}
			slotAt := w + 8*i
			slot := binary.LittleEndian.Uint64(b[slotAt:])
			switch k {
			case fkBigInt:
				fields[i] = a.int64(int64(slot))
			case fkString:
				v, err := binaryField(b, slotAt, slot, base)
				if err != nil {
					return nil, err
				}
				fields[i] = a.string(v)
			case fkInt:
				fields[i] = a.int32(int32(uint32(slot)))
			case fkDouble:
				fields[i] = a.float64(math.Float64frombits(slot))
			case fkBool:
				fields[i] = slot&0xFF != 0
			case fkOther:
				v, err := dc.field(i, b, slotAt, slot, base, depth, a)
				if err != nil {
					return nil, err
				}
				fields[i] = v
			default:
				v, err := fastField(k, b, slotAt, slot, base, a)
				if err != nil {
					return nil, err
				}
				fields[i] = v
			}
		}
		return r, nil
	}
	for i := 0; i < arity; i++ {
		bit := i + 8
		if b[bit>>3]&(1<<(bit&7)) != 0 {
			r.Fields[i] = nil // null (a recycled row holds an old value)
			continue
		}
		slotAt := w + 8*i
		slot := binary.LittleEndian.Uint64(b[slotAt:])
		if dc.k == kBinaryRow {
			r.Fields[i] = &Raw{Serializer: "slot", Bytes: append([]byte(nil), b[slotAt:slotAt+8]...)}
			continue
		}
		if i < len(dc.fast) && dc.fast[i] != fkOther {
			v, err := fastField(dc.fast[i], b, slotAt, slot, base, a)
			if err != nil {
				return nil, err
			}
			r.Fields[i] = v
			continue
		}
		v, err := dc.field(i, b, slotAt, slot, base, depth, a)
		if err != nil {
			return nil, err
		}
		r.Fields[i] = v
	}
	return r, nil
}

// fieldKind classifies row field types whose decoding needs no type
// details beyond the kind (the common scalars), so rows skip valueAt's
// switch on the type's root name.
type fieldKind uint8

const (
	fkOther fieldKind = iota
	fkBool
	fkTinyInt
	fkSmallInt
	fkInt
	fkFloat
	fkBigInt
	fkDouble
	fkString
	fkTimestamp0 // TIMESTAMP(0); fkTimestamp0+p for precision p <= 3
	fkTimestamp1
	fkTimestamp2
	fkTimestamp3
)

func fieldKinds(types []*LogicalType) []fieldKind {
	out := make([]fieldKind, len(types))
	for i, t := range types {
		if t == nil {
			continue
		}
		switch t.Root {
		case "BOOLEAN":
			out[i] = fkBool
		case "TINYINT":
			out[i] = fkTinyInt
		case "SMALLINT":
			out[i] = fkSmallInt
		case "INTEGER", "DATE", "TIME_WITHOUT_TIME_ZONE", "INTERVAL_YEAR_MONTH":
			out[i] = fkInt
		case "FLOAT":
			out[i] = fkFloat
		case "BIGINT", "INTERVAL_DAY_TIME":
			out[i] = fkBigInt
		case "DOUBLE":
			out[i] = fkDouble
		case "CHAR", "VARCHAR":
			out[i] = fkString
		case "TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE":
			if t.Precision >= 0 && t.Precision <= 3 {
				out[i] = fkTimestamp0 + fieldKind(t.Precision)
			}
		}
	}
	return out
}

// fastField decodes a field of kind k (not fkOther) exactly as valueAt
// does for its type.
func fastField(k fieldKind, b []byte, at int, slot uint64, base int64, a *Arena) (Value, error) {
	switch k {
	case fkBool:
		return b[at] != 0, nil
	case fkTinyInt:
		return int8(b[at]), nil
	case fkSmallInt:
		return int16(binary.LittleEndian.Uint16(b[at:])), nil
	case fkInt:
		return a.int32(int32(binary.LittleEndian.Uint32(b[at:]))), nil
	case fkFloat:
		return math.Float32frombits(binary.LittleEndian.Uint32(b[at:])), nil
	case fkBigInt:
		return a.int64(int64(slot)), nil
	case fkDouble:
		return a.float64(math.Float64frombits(slot)), nil
	case fkString:
		v, err := binaryField(b, at, slot, base)
		if err != nil {
			return nil, err
		}
		return a.string(v), nil
	case fkTimestamp0, fkTimestamp1, fkTimestamp2, fkTimestamp3:
		return a.timestamp(Timestamp{Millis: int64(slot), Precision: int(k - fkTimestamp0)}), nil
	}
	return nil, nil
}

// rowWith4 lets small rows (the common case for keys) and their fields
// share one allocation.
type rowWith4 struct {
	row    Row
	fields [4]Value
}

func newRow(kind keygroups.RowKind, arity int) *Row {
	if arity <= 4 {
		a := &rowWith4{}
		a.row.Kind = kind
		a.row.Fields = a.fields[:arity:arity]
		return &a.row
	}
	return &Row{Kind: kind, Fields: make([]Value, arity)}
}

func varPart(b []byte, slot uint64, base int64, slotAt int) ([]byte, error) {
	off := slot >> 32
	n := slot & 0xFFFFFFFF
	if off > uint64(len(b)) || n > uint64(len(b))-off {
		return nil, &binfmt.OffsetError{Offset: base + int64(slotAt), Err: fmt.Errorf("%w: variable-length field [%d,+%d) outside row of %d bytes", binfmt.ErrCorrupt, off, n, len(b))}
	}
	return b[off : off+n], nil
}

// binaryField reads a STRING/BYTES-like field: inline when the slot's top
// bit is set, else in the variable region.
func binaryField(b []byte, slotAt int, slot uint64, base int64) ([]byte, error) {
	if slot&(1<<63) != 0 {
		n := int(b[slotAt+7] & 0x7F)
		if n > 7 {
			return nil, &binfmt.OffsetError{Offset: base + int64(slotAt), Err: fmt.Errorf("%w: inline field length %d > 7", binfmt.ErrCorrupt, n)}
		}
		return b[slotAt : slotAt+n], nil
	}
	return varPart(b, slot, base, slotAt)
}

// fixedWidth is the element width of a type inside BinaryArrayData.
func fixedWidth(t *LogicalType) int {
	switch t.Root {
	case "BOOLEAN", "TINYINT":
		return 1
	case "SMALLINT":
		return 2
	case "INTEGER", "FLOAT", "DATE", "TIME_WITHOUT_TIME_ZONE", "INTERVAL_YEAR_MONTH":
		return 4
	}
	return 8
}

func (dc *decoder) field(i int, b []byte, slotAt int, _ uint64, base int64, depth int, a *Arena) (Value, error) {
	var kid *decoder
	if i < len(dc.kids) {
		kid = dc.kids[i]
	}
	return valueAt(dc.types[i], kid, b, slotAt, base, depth, a)
}

// valueAt decodes the value of type t stored at b[at:] inside a binary row
// or array whose bytes are b (variable-length parts are addressed relative
// to b). The caller guarantees fixedWidth(t) bytes at at.
func valueAt(t *LogicalType, kid *decoder, b []byte, at int, base int64, depth int, a *Arena) (Value, error) {
	if t == nil {
		return nil, &binfmt.OffsetError{Offset: base + int64(at), Err: fmt.Errorf("%w: field without a type", binfmt.ErrCorrupt)}
	}
	s := b[at:]
	var slot uint64
	if fixedWidth(t) == 8 {
		slot = binary.LittleEndian.Uint64(s)
	}
	switch t.Root {
	case "BOOLEAN":
		return s[0] != 0, nil
	case "TINYINT":
		return int8(s[0]), nil
	case "SMALLINT":
		return int16(binary.LittleEndian.Uint16(s)), nil
	case "INTEGER", "DATE", "TIME_WITHOUT_TIME_ZONE", "INTERVAL_YEAR_MONTH":
		return a.int32(int32(binary.LittleEndian.Uint32(s))), nil
	case "FLOAT":
		return math.Float32frombits(binary.LittleEndian.Uint32(s)), nil
	case "BIGINT", "INTERVAL_DAY_TIME":
		return a.int64(int64(slot)), nil
	case "DOUBLE":
		return a.float64(math.Float64frombits(slot)), nil
	case "CHAR", "VARCHAR":
		v, err := binaryField(b, at, slot, base)
		if err != nil {
			return nil, err
		}
		return a.string(v), nil
	case "BINARY", "VARBINARY":
		v, err := binaryField(b, at, slot, base)
		if err != nil {
			return nil, err
		}
		return append([]byte(nil), v...), nil
	case "DECIMAL":
		if t.Precision <= 18 {
			return Decimal{Unscaled: big.NewInt(int64(slot)), Scale: t.Scale}, nil
		}
		v, err := varPart(b, slot, base, at)
		if err != nil {
			return nil, err
		}
		return Decimal{Unscaled: signedBig(v), Scale: t.Scale}, nil
	case "TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE":
		if t.Precision <= 3 {
			return a.timestamp(Timestamp{Millis: int64(slot), Precision: t.Precision}), nil
		}
		off := slot >> 32
		if off > uint64(len(b)) || uint64(len(b))-off < 8 {
			return nil, &binfmt.OffsetError{Offset: base + int64(at), Err: fmt.Errorf("%w: timestamp offset %d outside row", binfmt.ErrCorrupt, off)}
		}
		return Timestamp{Millis: int64(binary.LittleEndian.Uint64(b[off:])), NanoOfMill: int32(uint32(slot)), Precision: t.Precision}, nil
	case "ROW", "STRUCTURED_TYPE":
		v, err := varPart(b, slot, base, at)
		if err != nil {
			return nil, err
		}
		nb := base + int64(slot>>32)
		if kid != nil && kid.k == kRowData {
			return kid.decodeRow(v, nb, depth+1, a)
		}
		if len(t.Fields) > 0 {
			sub := &decoder{k: kRowData, types: make([]*LogicalType, len(t.Fields))}
			for j, f := range t.Fields {
				sub.types[j] = f.Type
			}
			return sub.decodeRow(v, nb, depth+1, a)
		}
		return &Raw{Serializer: t.String(), Bytes: append([]byte(nil), v...)}, nil
	case "ARRAY":
		v, err := varPart(b, slot, base, at)
		if err != nil {
			return nil, err
		}
		return decodeArray(t.Element, v, base+int64(slot>>32), depth+1)
	case "MAP", "MULTISET":
		v, err := varPart(b, slot, base, at)
		if err != nil {
			return nil, err
		}
		kt, vt := t.Key, t.Value
		if t.Root == "MULTISET" {
			kt, vt = t.Element, &LogicalType{Root: "INTEGER"}
		}
		return decodeMap(kt, vt, v, base+int64(slot>>32), depth+1)
	case "NULL":
		return nil, nil
	default:
		// RAW and anything newer: keep the bytes.
		v, err := varPart(b, slot, base, at)
		if err != nil {
			return nil, err
		}
		name := t.String()
		if kid != nil && kid.snap != nil {
			name = kid.snap.Class
		}
		return &Raw{Serializer: name, Bytes: append([]byte(nil), v...)}, nil
	}
}

// decodeArray decodes BinaryArrayData: i32 (native LE) element count, null
// bits padded to 4-byte words, fixed-width elements, variable part.
func decodeArray(et *LogicalType, b []byte, base int64, depth int) (List, error) {
	bad := func(format string, args ...any) error {
		return &binfmt.OffsetError{Offset: base, Err: fmt.Errorf("%w: array: %s", binfmt.ErrCorrupt, fmt.Sprintf(format, args...))}
	}
	if depth > maxSnapshotDepth {
		return nil, bad("nested deeper than %d", maxSnapshotDepth)
	}
	if et == nil {
		return nil, bad("no element type")
	}
	if len(b) < 4 {
		return nil, bad("%d bytes", len(b))
	}
	n := int64(int32(binary.LittleEndian.Uint32(b)))
	w := int64(fixedWidth(et))
	hdr := 4 + (n+31)/32*4
	if n < 0 || hdr+n*w > int64(len(b)) {
		return nil, bad("%d elements do not fit in %d bytes", n, len(b))
	}
	out := make(List, n)
	for i := int64(0); i < n; i++ {
		if b[4+i/8]&(1<<(i%8)) != 0 {
			continue
		}
		v, err := valueAt(et, nil, b, int(hdr+i*w), base, depth, nil)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// decodeMap decodes BinaryMapData: i32 (native LE) key-array size, key
// array, value array.
func decodeMap(kt, vt *LogicalType, b []byte, base int64, depth int) (Map, error) {
	if len(b) < 4 {
		return nil, &binfmt.OffsetError{Offset: base, Err: fmt.Errorf("%w: map of %d bytes", binfmt.ErrCorrupt, len(b))}
	}
	ks := int64(int32(binary.LittleEndian.Uint32(b)))
	if ks < 0 || 4+ks > int64(len(b)) {
		return nil, &binfmt.OffsetError{Offset: base, Err: fmt.Errorf("%w: map key array size %d in %d bytes", binfmt.ErrCorrupt, ks, len(b))}
	}
	keys, err := decodeArray(kt, b[4:4+ks], base+4, depth)
	if err != nil {
		return nil, err
	}
	vals, err := decodeArray(vt, b[4+ks:], base+4+ks, depth)
	if err != nil {
		return nil, err
	}
	if len(keys) != len(vals) {
		return nil, &binfmt.OffsetError{Offset: base, Err: fmt.Errorf("%w: map with %d keys and %d values", binfmt.ErrCorrupt, len(keys), len(vals))}
	}
	out := make(Map, len(keys))
	for i := range keys {
		out[i] = MapEntry{Key: keys[i], Value: vals[i]}
	}
	return out, nil
}

// DecodeAll decodes b as exactly one value: leftover bytes are an error.
// base is b's absolute offset.
func DecodeAll(dec Decoder, b []byte, base int64) (Value, error) {
	d := binfmt.New(b, base)
	v := dec.Decode(d)
	if d.Err() != nil {
		return nil, d.Err()
	}
	if d.Len() != 0 {
		return nil, &binfmt.OffsetError{Offset: d.Offset(), Err: fmt.Errorf("%w: %d bytes left after %s value", binfmt.ErrCorrupt, d.Len(), dec.Snapshot().Name())}
	}
	return v, nil
}
