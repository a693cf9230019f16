package stateexport

import (
	"context"
	"encoding/base64"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/flight"
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

func newFlatParquetWriter(schema *arrow.Schema, w io.Writer, props *parquet.WriterProperties) (*flatParquetWriter, error) {
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
	return pqarrow.WriteArrowToColumn(p.ctxs[i], cw, a, def, nil, nullable)
}

func (p *flatParquetWriter) Close() error { return p.wr.Close() }
