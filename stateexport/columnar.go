package stateexport

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/savepoint/serde"
)

// The columnar path: batches of savepoint.ScanColumns (typed columns of
// decoded entries, no boxed values) are copied straight into Arrow's
// memory layout — value buffers, validity bitmaps, string offsets and
// bytes — in buffers that are reused from one row group to the next. A
// row group becomes Arrow arrays over those buffers without a copy
// (memory.NewBufferBytes); the record writer consumes them synchronously,
// after which the buffers are refilled.

// colBuf accumulates one column in Arrow's layout.
type colBuf struct {
	typ arrow.DataType
	// width is the bytes per value of fixed-width types; 0 for utf8 and
	// binary (offsets + data), -1 for booleans (a bitmap in data).
	width int
	data  []byte
	offs  []int32 // utf8/binary: n+1 offsets
	// valid is the validity bitmap, nil while the column has no null.
	valid []byte
	// run is the value of a string column that holds only that value so
	// far; data and offs then hold runRows copies (kept across resets).
	run     string
	runRows int
	nulls   int
	n       int
}

func newColBuf(typ arrow.DataType) (*colBuf, bool) {
	c := &colBuf{typ: typ}
	switch typ.ID() {
	case arrow.STRING, arrow.BINARY:
		c.offs = []int32{0}
	case arrow.BOOL:
		c.width = -1
	case arrow.INT8:
		c.width = 1
	case arrow.INT16:
		c.width = 2
	case arrow.INT32, arrow.DATE32, arrow.TIME32, arrow.FLOAT32:
		c.width = 4
	case arrow.INT64, arrow.TIMESTAMP, arrow.FLOAT64:
		c.width = 8
	default:
		return nil, false
	}
	return c, true
}

func (c *colBuf) reset() {
	c.valid = c.valid[:0]
	if c.run == "" {
		c.data = c.data[:0]
		if c.offs != nil {
			c.offs = c.offs[:1]
		}
	}
	c.nulls, c.n = 0, 0
	if cap(c.valid) == 0 {
		c.valid = nil
	}
}

// grow extends a fixed-width column by n values and returns their bytes.
func (c *colBuf) grow(n int) []byte {
	start := len(c.data)
	end := start + n*c.width
	if end > cap(c.data) {
		nd := make([]byte, end, max(2*cap(c.data), end, 4096))
		copy(nd, c.data)
		c.data = nd
	} else {
		c.data = c.data[:end]
	}
	return c.data[start:end]
}

// growBits extends the bitmap b to hold n bits (new bits zero).
func growBits(b []byte, n int) []byte {
	need := (n + 7) >> 3
	for len(b) < need {
		b = append(b, 0)
	}
	return b
}

// The validity bitmap is kept exact: once a column has a null, every
// append writes its bit. markValid/markNull handle one row each.
func (c *colBuf) markRows(from, n int, isNull func(i int) bool) {
	if c.nulls == 0 && c.valid == nil {
		// Fast scan for the first null.
		first := -1
		for i := 0; i < n; i++ {
			if isNull(i) {
				first = i
				break
			}
		}
		if first < 0 {
			return
		}
		c.valid = make([]byte, 0, 1024)
		c.valid = growBits(c.valid, from+n)
		for r := 0; r < from+first; r++ {
			c.valid[r>>3] |= 1 << (r & 7)
		}
		for i := first; i < n; i++ {
			if isNull(i) {
				c.nulls++
			} else {
				r := from + i
				c.valid[r>>3] |= 1 << (r & 7)
			}
		}
		return
	}
	c.valid = growBits(c.valid, from+n)
	for i := 0; i < n; i++ {
		if isNull(i) {
			c.nulls++
		} else {
			r := from + i
			c.valid[r>>3] |= 1 << (r & 7)
		}
	}
}

// kindFits reports whether values of serde kind k are copied into
// columns of type typ.
func kindFits(typ arrow.DataType, k serde.ColKind) bool {
	switch typ.ID() {
	case arrow.STRING:
		return k == serde.ColString
	case arrow.BOOL:
		return k == serde.ColBool
	case arrow.INT8:
		return k == serde.ColTinyInt
	case arrow.INT16:
		return k == serde.ColSmallInt
	case arrow.INT32, arrow.DATE32, arrow.TIME32:
		return k == serde.ColInt
	case arrow.INT64:
		return k == serde.ColBigInt
	case arrow.TIMESTAMP:
		return k == serde.ColTimestamp && typ.(*arrow.TimestampType).Unit == arrow.Millisecond
	case arrow.FLOAT32:
		return k == serde.ColFloat
	case arrow.FLOAT64:
		return k == serde.ColDouble
	}
	return false
}

// appendSerde appends rows [lo, lo+n) of a serde column whose kind fits
// (kindFits).
func (c *colBuf) appendSerde(src *serde.Column, lo, n int) {
	from := c.n
	switch c.typ.ID() {
	case arrow.STRING:
		c.unrun()
		base := src.Offsets[lo]
		at := int32(len(c.data)) - int32(base)
		c.data = append(c.data, src.Data[base:src.Offsets[lo+n]]...)
		for _, o := range src.Offsets[lo+1 : lo+n+1] {
			c.offs = append(c.offs, at+int32(o))
		}
	case arrow.BOOL:
		c.data = growBits(c.data, from+n)
		for i, v := range src.Ints[lo : lo+n] {
			if v != 0 {
				r := from + i
				c.data[r>>3] |= 1 << (r & 7)
			}
		}
	case arrow.INT8:
		dst := arrow.Int8Traits.CastFromBytes(c.grow(n))
		for i, v := range src.Ints[lo : lo+n] {
			dst[i] = int8(v)
		}
	case arrow.INT16:
		dst := arrow.Int16Traits.CastFromBytes(c.grow(n))
		for i, v := range src.Ints[lo : lo+n] {
			dst[i] = int16(v)
		}
	case arrow.INT32, arrow.DATE32, arrow.TIME32:
		dst := arrow.Int32Traits.CastFromBytes(c.grow(n))
		for i, v := range src.Ints[lo : lo+n] {
			dst[i] = int32(v)
		}
	case arrow.INT64, arrow.TIMESTAMP:
		copy(arrow.Int64Traits.CastFromBytes(c.grow(n)), src.Ints[lo:lo+n])
	case arrow.FLOAT32:
		dst := arrow.Float32Traits.CastFromBytes(c.grow(n))
		for i, v := range src.Floats[lo : lo+n] {
			dst[i] = float32(v)
		}
	case arrow.FLOAT64:
		copy(arrow.Float64Traits.CastFromBytes(c.grow(n)), src.Floats[lo:lo+n])
	}
	c.n += n
	c.markRows(from, n, func(i int) bool { return src.IsNull(lo + i) })
}

// appendInt64s appends non-null int64 (or timestamp) values.
func (c *colBuf) appendInt64s(v []int64) {
	from := c.n
	copy(arrow.Int64Traits.CastFromBytes(c.grow(len(v))), v)
	c.n += len(v)
	if c.valid != nil {
		c.markRows(from, len(v), func(int) bool { return false })
	}
}

// appendInt32Run appends n copies of v.
func (c *colBuf) appendInt32Run(v int32, n int) {
	from := c.n
	dst := arrow.Int32Traits.CastFromBytes(c.grow(n))
	for i := range dst {
		dst[i] = v
	}
	c.n += n
	if c.valid != nil {
		c.markRows(from, n, func(int) bool { return false })
	}
}

// appendStringRun appends n copies of s. Runs of one value (the operator
// column) keep their bytes and offsets across resets: a later row group
// only extends them.
func (c *colBuf) appendStringRun(s string, n int) {
	from := c.n
	if c.valid == nil && (c.run == s || c.n == 0) {
		if c.run != s {
			c.run, c.runRows = s, 0
			c.data, c.offs = c.data[:0], c.offs[:1]
		}
		if need := from + n; need > c.runRows {
			for len(c.data) < need*len(s) {
				c.data = append(c.data, s...)
			}
			for i := len(c.offs); i <= need; i++ {
				c.offs = append(c.offs, int32(i*len(s)))
			}
			c.runRows = need
		}
		c.n += n
		return
	}
	c.unrun()
	at := int32(len(c.data))
	for i := 1; i <= n; i++ {
		c.data = append(c.data, s...)
		c.offs = append(c.offs, at+int32(i*len(s)))
	}
	c.n += n
	if c.valid != nil {
		c.markRows(from, n, func(int) bool { return false })
	}
}

// unrun leaves run mode (see appendStringRun), keeping the rows so far.
func (c *colBuf) unrun() {
	if c.run != "" {
		c.data, c.offs = c.data[:c.offs[c.n]], c.offs[:c.n+1]
		c.run, c.runRows = "", 0
	}
}

// appendNulls appends n nulls.
func (c *colBuf) appendNulls(n int) {
	from := c.n
	switch {
	case c.width > 0:
		clear(c.grow(n))
	case c.width < 0:
		c.data = growBits(c.data, from+n)
	default:
		c.unrun()
		at := int32(len(c.data))
		for i := 0; i < n; i++ {
			c.offs = append(c.offs, at)
		}
	}
	c.n += n
	c.markRows(from, n, func(int) bool { return true })
}

// array returns an Arrow array over the buffers (no copy; valid until the
// next reset).
func (c *colBuf) array() arrow.Array {
	var valid *memory.Buffer
	if c.nulls > 0 {
		c.valid = growBits(c.valid, c.n)
		valid = memory.NewBufferBytes(c.valid)
	}
	var bufs []*memory.Buffer
	switch {
	case c.width == 0:
		offs := c.offs[:c.n+1]
		bufs = []*memory.Buffer{valid, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(offs)), memory.NewBufferBytes(c.data[:offs[c.n]])}
	case c.width < 0:
		c.data = growBits(c.data, c.n)
		bufs = []*memory.Buffer{valid, memory.NewBufferBytes(c.data)}
	default:
		bufs = []*memory.Buffer{valid, memory.NewBufferBytes(c.data)}
	}
	d := array.NewData(c.typ, c.n, bufs, nil, c.nulls, 0)
	defer d.Release()
	return array.MakeFromData(d)
}

// colSet is the columns of one row group of a state table on the
// columnar path.
type colSet struct {
	cols []*colBuf
	n    int
}

func (s *colSet) reset() {
	for _, c := range s.cols {
		c.reset()
	}
	s.n = 0
}

// record returns the row group as a record batch over the buffers.
func (s *colSet) record(schema *arrow.Schema) arrow.RecordBatch {
	arrs := make([]arrow.Array, len(s.cols))
	for i, c := range s.cols {
		arrs[i] = c.array()
	}
	rec := array.NewRecordBatch(schema, arrs, int64(s.n))
	for _, a := range arrs {
		a.Release()
	}
	return rec
}

// columnarPlan maps the columns of a ScanColumns batch to the table
// columns: which table column each key/value field fills.
type columnarPlan struct {
	// first data column (after operator, subtask, key_group and, for
	// timers, timestamp)
	keyAt, valAt, ttlAt int
	nKey, nVal          int
	timer               bool
}

// columnarPlanFor reports how batches of a state fill the table of layout
// l, or nil when they cannot (a type the columnar path does not copy).
func columnarPlanFor(l *stateLayout) *columnarPlan {
	if l.list || len(l.ns) > 0 || len(l.userKey) > 0 {
		return nil
	}
	for _, f := range l.schema.Fields() {
		if _, ok := newColBuf(f.Type); !ok {
			return nil
		}
	}
	p := &columnarPlan{timer: l.timer, nKey: len(l.key), nVal: len(l.value)}
	i := 3
	if l.timer {
		i++
		p.nVal = 0
	}
	p.keyAt = i
	p.valAt = i + p.nKey
	p.ttlAt = -1
	if l.ttl {
		p.ttlAt = p.valAt + p.nVal
	}
	return p
}

func newColSet(schema *arrow.Schema) *colSet {
	s := &colSet{}
	for _, f := range schema.Fields() {
		c, _ := newColBuf(f.Type)
		s.cols = append(s.cols, c)
	}
	return s
}

// fits reports whether batch b's columns have the shapes and kinds the
// table's columns (schema) take.
func (p *columnarPlan) fits(schema *arrow.Schema, b *savepoint.ColumnBatch) bool {
	if (b.Values == nil) != p.timer || b.Keys.Plan().TTL() {
		return false
	}
	if len(b.Keys.Fields) != p.nKey || (!p.timer && len(b.Values.Fields) != p.nVal) {
		return false
	}
	if !p.timer && (b.Values.Plan().TTL() != (p.ttlAt >= 0)) {
		return false
	}
	for j := range b.Keys.Fields {
		if !kindFits(schema.Field(p.keyAt+j).Type, b.Keys.Fields[j].Kind) {
			return false
		}
	}
	if !p.timer {
		for j := range b.Values.Fields {
			if !kindFits(schema.Field(p.valAt+j).Type, b.Values.Fields[j].Kind) {
				return false
			}
		}
	}
	return true
}

// appendBatch appends rows [lo, hi) of b (which fits) to s.
func (p *columnarPlan) appendBatch(s *colSet, op string, b *savepoint.ColumnBatch, lo, hi int) {
	n := hi - lo
	if n <= 0 {
		return
	}
	s.cols[0].appendStringRun(op, n)
	s.cols[1].appendInt32Run(int32(b.Subtask), n)
	s.cols[2].appendInt32Run(int32(b.KeyGroup), n)
	if p.timer {
		s.cols[3].appendInt64s(b.Timestamps[lo:hi])
	}
	for j := range b.Keys.Fields {
		s.cols[p.keyAt+j].appendSerde(&b.Keys.Fields[j], lo, n)
	}
	if !p.timer {
		for j := range b.Values.Fields {
			s.cols[p.valAt+j].appendSerde(&b.Values.Fields[j], lo, n)
		}
		if p.ttlAt >= 0 {
			s.cols[p.ttlAt].appendInt64s(b.Values.TTL[lo:hi])
		}
	}
	s.n += n
}

// bigStrings reports whether a string column holds so many bytes that the
// row group must end (offsets are 32-bit).
func (s *colSet) bigStrings() bool { return s.stringBytes() >= 1<<30 }

// stringBytes is the most bytes a string column holds.
func (s *colSet) stringBytes() int {
	n := 0
	for _, c := range s.cols {
		if c.width == 0 {
			n = max(n, len(c.data))
		}
	}
	return n
}
