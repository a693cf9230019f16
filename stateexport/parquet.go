package stateexport

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// flatParquetWriter writes tables whose columns are all top-level
// primitives (no struct, list or map) and encodes the columns of each row
// group in parallel: the row group is a buffered one (every column chunk
// encoded and compressed into memory by its own goroutine, then written to
// the stream in column order on close), so the file's bytes are those of
// a sequential write. The footer and the stored Arrow schema are those
// pqarrow.FileWriter writes for the same schema.
type flatParquetWriter struct {
	wr       *file.Writer
	schema   *arrow.Schema
	arrProps pqarrow.ArrowWriterProperties
	// per column: write context (scratch buffers of one goroutine) and
	// definition levels (reused)
	ctxs []context.Context
	defs [][]int16
	// dict marks the dictionary-encoded string columns, which are handed
	// to the column writer as Arrow dictionary arrays (dictStrings)
	dict []*stringDict
}

// flatSchema reports whether every field of schema is a primitive that
// maps to one Parquet leaf column.
func flatSchema(schema *arrow.Schema) bool {
	for _, f := range schema.Fields() {
		switch f.Type.ID() {
		case arrow.STRUCT, arrow.LIST, arrow.LARGE_LIST, arrow.MAP, arrow.FIXED_SIZE_LIST, arrow.DICTIONARY,
			arrow.EXTENSION, arrow.SPARSE_UNION, arrow.DENSE_UNION, arrow.RUN_END_ENCODED, arrow.LIST_VIEW, arrow.LARGE_LIST_VIEW:
			return false
		}
	}
	return true
}

func newFlatParquetWriter(schema *arrow.Schema, w io.Writer, props *parquet.WriterProperties, dict []string) (*flatParquetWriter, error) {
	arrProps := pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())
	pqschema, err := pqarrow.ToParquet(schema, props, arrProps)
	if err != nil {
		return nil, err
	}
	meta := make(metadata.KeyValueMetadata, 0)
	md := schema.Metadata()
	for i := 0; i < md.Len(); i++ {
		meta.Append(md.Keys()[i], md.Values()[i])
	}
	// A flat schema needs none of the list-name normalization pqarrow
	// applies before storing the schema.
	meta.Append("ARROW:schema", base64.StdEncoding.EncodeToString(flight.SerializeSchema(schema, props.Allocator())))
	wr, err := file.NewParquetWriterWithError(w, pqschema.Root(), file.WithWriterProps(props), file.WithWriteMetadata(meta))
	if err != nil {
		return nil, err
	}
	p := &flatParquetWriter{wr: wr, schema: schema, arrProps: arrProps}
	for range schema.Fields() {
		p.ctxs = append(p.ctxs, pqarrow.NewArrowWriteContext(context.Background(), &p.arrProps))
	}
	p.defs = make([][]int16, schema.NumFields())
	p.dict = make([]*stringDict, schema.NumFields())
	for _, name := range dict {
		for i, f := range schema.Fields() {
			if f.Name == name && (f.Type.ID() == arrow.STRING || f.Type.ID() == arrow.BINARY) {
				p.dict[i] = &stringDict{}
			}
		}
	}
	return p, nil
}

// parquetColumnWorkers is the number of goroutines encoding the columns of
// one row group.
func parquetColumnWorkers() int { return max(1, min(runtime.GOMAXPROCS(0), 8)) }

func (p *flatParquetWriter) Write(rec arrow.RecordBatch) error {
	rgw, err := p.wr.AppendBufferedRowGroupChecked()
	if err != nil {
		return err
	}
	n := int(rec.NumCols())
	errs := make([]error, n)
	var next atomic.Int32
	work := func() {
		for {
			i := int(next.Add(1) - 1)
			if i >= n {
				return
			}
			errs[i] = p.writeColumn(rgw, i, rec.Column(i))
		}
	}
	workers := min(parquetColumnWorkers(), n)
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return rgw.Close()
}

// writeColumn encodes column i of the row group: definition level 1 for
// present values and 0 for nulls of nullable columns, none for required
// ones.
func (p *flatParquetWriter) writeColumn(rgw file.BufferedRowGroupWriter, i int, a arrow.Array) error {
	cw, err := rgw.Column(i)
	if err != nil {
		return err
	}
	nullable := p.schema.Field(i).Nullable
	var def []int16
	if nullable {
		def = p.defs[i][:0]
		if cap(def) < a.Len() {
			def = make([]int16, 0, a.Len())
		}
		def = def[:a.Len()]
		if a.NullN() == 0 {
			for j := range def {
				def[j] = 1
			}
		} else {
			for j := range def {
				if a.IsValid(j) {
					def[j] = 1
				} else {
					def[j] = 0
				}
			}
		}
		p.defs[i] = def
	}
	if d := p.dict[i]; d != nil && a.Len() <= maxDictRows {
		da := d.encode(a)
		defer da.Release()
		err = pqarrow.WriteArrowToColumn(p.ctxs[i], cw, da, def, nil, nullable)
	} else {
		err = pqarrow.WriteArrowToColumn(p.ctxs[i], cw, a, def, nil, nullable)
	}
	if err != nil {
		return err
	}
	return flushPages(cw, a.Len())
}

// pageFlusher is implemented by the column writers of package file.
type pageFlusher interface {
	FlushCurrentPage() error
	FlushBufferedDataPages() error
}

// flushPages builds (encodes and compresses) the column's pending data
// page now, on the column's goroutine, instead of in the row group's
// Close, which closes the columns one after the other. Without an active
// dictionary, FlushBufferedDataPages writes the pages to the column's
// in-memory buffer as Close would. With one, the pages must stay behind
// the dictionary page Close writes first: FlushCurrentPage only builds the
// page and keeps it buffered — called when the page certainly holds values
// (n rows, at most maxDictRows: dictionary indices of so few rows stay
// below the data page size, so no page was cut during the write).
func flushPages(cw file.ColumnChunkWriter, n int) error {
	f, ok := cw.(pageFlusher)
	if !ok || n == 0 {
		return nil
	}
	switch cw.CurrentEncoder().Encoding() {
	case parquet.Encodings.PlainDict, parquet.Encodings.RLEDict:
		if n <= maxDictRows {
			return f.FlushCurrentPage()
		}
		return nil
	}
	return f.FlushBufferedDataPages()
}

// maxDictRows bounds the row groups whose dictionary string columns go
// through stringDict: up to 2^18 rows the dictionary indices (at most 16
// bits wide for a dictionary of 2^16 values, and wider dictionaries fall
// back to plain) fit one data page, which gets the page statistics the
// writer computes for a dictionary array.
const maxDictRows = 1 << 18

// stringDict turns a string or binary column into an Arrow dictionary
// array (int32 indices in first-occurrence order, as the Parquet
// dictionary encoder numbers values). The Parquet writer then takes the
// dictionary and indices as they are instead of hashing every value
// through an interface conversion (an allocation per value).
type stringDict struct {
	ids  map[string]int32
	idx  []int32
	vals [][]byte
}

func (d *stringDict) encode(a arrow.Array) arrow.Array {
	if d.ids == nil {
		d.ids = map[string]int32{}
	}
	clear(d.ids)
	d.vals = d.vals[:0]
	n := a.Len()
	if cap(d.idx) < n {
		d.idx = make([]int32, n)
	}
	idx := d.idx[:n]
	var value func(i int) []byte
	if b, ok := a.(*array.Binary); ok {
		value = b.Value
	} else {
		s := a.(*array.String)
		offs, data := s.ValueOffsets(), s.ValueBytes()
		value = func(i int) []byte { return data[offs[i]-offs[0] : offs[i+1]-offs[0]] }
	}
	var last []byte
	lastID := int32(-1)
	for i := 0; i < n; i++ {
		if a.IsNull(i) {
			idx[i] = 0
			continue
		}
		v := value(i)
		if lastID >= 0 && bytes.Equal(v, last) {
			idx[i] = lastID
			continue
		}
		id, ok := d.ids[string(v)]
		if !ok {
			id = int32(len(d.vals))
			d.ids[string(v)] = id
			d.vals = append(d.vals, v)
		}
		idx[i], last, lastID = id, v, id
	}
	var dict arrow.Array
	if a.DataType().ID() == arrow.BINARY {
		bb := array.NewBinaryBuilder(memory.DefaultAllocator, arrow.BinaryTypes.Binary)
		bb.AppendValues(d.vals, nil)
		dict = bb.NewArray()
		bb.Release()
	} else {
		sb := array.NewStringBuilder(memory.DefaultAllocator)
		for _, v := range d.vals {
			sb.BinaryBuilder.Append(v)
		}
		dict = sb.NewArray()
		sb.Release()
	}
	defer dict.Release()
	ad := a.Data()
	indices := array.NewData(arrow.PrimitiveTypes.Int32, n,
		[]*memory.Buffer{ad.Buffers()[0], memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(idx))}, nil, a.NullN(), 0)
	defer indices.Release()
	if ad.Offset() != 0 && ad.Buffers()[0] != nil {
		// The validity bits of a sliced array start mid-buffer: copy them.
		bits := make([]byte, (n+7)/8)
		for i := 0; i < n; i++ {
			if a.IsValid(i) {
				bits[i>>3] |= 1 << (i & 7)
			}
		}
		indices.Buffers()[0] = memory.NewBufferBytes(bits)
	}
	typ := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: a.DataType()}
	return array.NewDictionaryArray(typ, array.MakeFromData(indices), dict)
}

func (p *flatParquetWriter) Close() error { return p.wr.Close() }
