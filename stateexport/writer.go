package stateexport

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/sfstate/sfstate/s3"
)

// Format is an output file format.
type Format string

// Output formats.
const (
	Parquet Format = "parquet"
	Arrow   Format = "arrow" // Arrow IPC file format (Feather V2)
	CSV     Format = "csv"
	JSONL   Format = "jsonl"
)

// ParseFormat parses a format name.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case Parquet, Arrow, CSV, JSONL:
		return f, nil
	}
	return "", fmt.Errorf("stateexport: unknown format %q (want parquet, arrow, csv or jsonl)", s)
}

// Ext is the file name extension of the format.
func (f Format) Ext() string { return string(f) }

// Compression is a Parquet page compression codec.
type Compression string

// Compression codecs.
const (
	Zstd         Compression = "zstd"
	Snappy       Compression = "snappy"
	Uncompressed Compression = "none"
)

// ParseCompression parses a compression name.
func ParseCompression(s string) (Compression, error) {
	c := Compression(s)
	if _, err := c.codec(); err != nil {
		return "", err
	}
	return c, nil
}

func (c Compression) codec() (compress.Compression, error) {
	switch c {
	case Zstd, "":
		return compress.Codecs.Zstd, nil
	case Snappy:
		return compress.Codecs.Snappy, nil
	case Uncompressed:
		return compress.Codecs.Uncompressed, nil
	}
	return 0, fmt.Errorf("stateexport: unknown compression %q (want zstd, snappy or none)", c)
}

// recordWriter writes record batches of one schema to a stream.
type recordWriter interface {
	Write(rec arrow.RecordBatch) error
	// Close finishes the file (footer) without closing the stream.
	Close() error
}

// newRecordWriter opens a writer of format f on w. first is the first
// record batch to be written (nil: none); Parquet column encodings are
// chosen from it (see parquetProperties); plain keeps every column that is
// not dictionary-encoded in PLAIN pages.
func newRecordWriter(f Format, w io.Writer, schema *arrow.Schema, c Compression, plain bool, first arrow.RecordBatch) (recordWriter, error) {
	switch f {
	case Parquet:
		codec, err := c.codec()
		if err != nil {
			return nil, err
		}
		dict := dictionaryColumns(schema, first)
		props, err := parquetProperties(schema, codec, dict, plain)
		if err != nil {
			return nil, err
		}
		if flatSchema(schema) {
			return newFlatParquetWriter(schema, w, props, dict)
		}
		fw, err := pqarrow.NewFileWriter(schema, w, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
		if err != nil {
			return nil, err
		}
		return &parquetWriter{fw: fw}, nil
	case Arrow:
		opts := []ipc.Option{ipc.WithSchema(schema)}
		switch c {
		case Zstd:
			opts = append(opts, ipc.WithZstd())
		case Snappy, "", Uncompressed:
			// IPC has no Snappy; LZ4 would need readers to have it:
			// uncompressed unless zstd is asked for.
		}
		fw, err := ipc.NewFileWriter(w, opts...)
		if err != nil {
			return nil, err
		}
		return fw, nil
	case CSV:
		return newCSVWriter(w, schema)
	case JSONL:
		return &jsonWriter{w: bufio.NewWriterSize(w, 256<<10), schema: schema}, nil
	}
	return nil, fmt.Errorf("stateexport: unknown format %q", f)
}

// parquetProperties are the Parquet writer properties of a table: page
// compression codec, statistics on, row groups as cut by the exporter (one
// per record batch), dictionary encoding for the top-level columns where it
// pays — those whose first record batch repeats its values (dict, see
// dictionaryColumns); dictionaries of mostly distinct columns (ids, time
// stamps, counters) only cost hashing before the writer falls back to plain
// pages, in every row group — and, unless plain, the delta encodings for
// the other columns (see deltaEncodings).
func parquetProperties(schema *arrow.Schema, codec compress.Compression, dict []string, plain bool) (*parquet.WriterProperties, error) {
	opts := []parquet.WriterProperty{
		parquet.WithCompression(codec),
		parquet.WithStats(true),
		parquet.WithDictionaryDefault(false),
		parquet.WithMaxRowGroupLength(1 << 40),
		parquet.WithCreatedBy("sfstate export"),
	}
	if codec == compress.Codecs.Zstd {
		// zstd's fastest level: pages are small and already dictionary,
		// delta or plain encoded; higher levels cost more time than they
		// save bytes.
		opts = append(opts, parquet.WithCompressionLevel(zstdLevel))
	}
	for _, p := range dict {
		opts = append(opts, parquet.WithDictionaryFor(p, true))
	}
	if !plain {
		enc, err := deltaEncodings(schema, dict)
		if err != nil {
			return nil, err
		}
		opts = append(opts, enc...)
	}
	return parquet.NewWriterProperties(opts...), nil
}

// deltaEncodings sets the page encoding of every leaf column of schema
// that is not dictionary-encoded (dict names top-level columns) by its
// physical type:
//
//   - INT32 and INT64 (integers, DATE, TIME, TIMESTAMP, key groups,
//     subtasks, list indices): DELTA_BINARY_PACKED, the differences of
//     consecutive values bit-packed per block of 128 at the width of the
//     block's range, so ids, counters and time stamps of one key group
//     take a few bytes instead of 4 or 8;
//   - BYTE_ARRAY (strings, binaries): DELTA_BYTE_ARRAY, each value as the
//     length of the prefix it shares with the previous one plus its
//     suffix, which shrinks keys of one shape ("user-1041", "user-1042");
//   - BOOLEAN, FLOAT, DOUBLE and FIXED_LEN_BYTE_ARRAY (decimals): PLAIN.
//
// Both are standard Parquet encodings that DuckDB, pyarrow, Polars,
// parquet-go and Spark 3.3+ read. Compared with PLAIN pages they leave the
// page compressor much less to do: on the export benchmark's rows (sfstate
// bench export) the zstd pages are ~20% smaller and the encoding takes
// about half the CPU time. Options.PlainEncoding turns them off for older
// readers.
func deltaEncodings(schema *arrow.Schema, dict []string) ([]parquet.WriterProperty, error) {
	sc, err := pqarrow.ToParquet(schema, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps())
	if err != nil {
		return nil, err
	}
	var opts []parquet.WriterProperty
	for i := 0; i < sc.NumColumns(); i++ {
		col := sc.Column(i)
		path := col.Path()
		if slices.Contains(dict, path) {
			continue
		}
		switch col.PhysicalType() {
		case parquet.Types.Int32, parquet.Types.Int64:
			opts = append(opts, parquet.WithEncodingFor(path, parquet.Encodings.DeltaBinaryPacked))
		case parquet.Types.ByteArray:
			opts = append(opts, parquet.WithEncodingFor(path, parquet.Encodings.DeltaByteArray))
		}
	}
	return opts, nil
}

// zstdLevel is the zstd level of Parquet pages (see parquetProperties).
var zstdLevel = 1

// dictSample is the number of leading rows dictionaryColumns looks at.
const dictSample = 8192

// dictionaryColumns lists the top-level primitive columns of schema to
// dictionary-encode: string and binary columns when first is nil (no
// rows to judge by), else the columns with at most one distinct value per
// four of the first dictSample rows of first.
func dictionaryColumns(schema *arrow.Schema, first arrow.RecordBatch) []string {
	var out []string
	for i, f := range schema.Fields() {
		if first == nil {
			switch f.Type.ID() {
			case arrow.STRING, arrow.BINARY:
				out = append(out, f.Name)
			}
			continue
		}
		if repeats(first.Column(i)) {
			out = append(out, f.Name)
		}
	}
	return out
}

// repeats reports whether the first dictSample values of a repeat enough
// for a dictionary (at most one distinct value per four).
func repeats(a arrow.Array) bool {
	n := min(a.Len(), dictSample)
	if n == 0 {
		return false
	}
	limit := n / 4
	switch x := a.(type) {
	case *array.String:
		seen := map[string]struct{}{}
		for i := 0; i < n; i++ {
			if !x.IsNull(i) {
				seen[x.Value(i)] = struct{}{}
				if len(seen) > limit {
					return false
				}
			}
		}
		return true
	case *array.Binary:
		seen := map[string]struct{}{}
		for i := 0; i < n; i++ {
			if !x.IsNull(i) {
				seen[string(x.Value(i))] = struct{}{}
				if len(seen) > limit {
					return false
				}
			}
		}
		return true
	}
	w := 0
	switch a.DataType().ID() {
	case arrow.INT8:
		w = 1
	case arrow.INT16:
		w = 2
	case arrow.INT32, arrow.DATE32, arrow.TIME32, arrow.FLOAT32:
		w = 4
	case arrow.INT64, arrow.TIMESTAMP, arrow.FLOAT64, arrow.TIME64, arrow.DATE64:
		w = 8
	default:
		return false // booleans, decimals, nested types
	}
	d := a.Data()
	bufs := d.Buffers()
	if len(bufs) < 2 || bufs[1] == nil {
		return false
	}
	b := bufs[1].Bytes()[d.Offset()*w:]
	seen := map[uint64]struct{}{}
	for i := 0; i < n; i++ {
		if a.IsNull(i) {
			continue
		}
		var v uint64
		for k := 0; k < w; k++ {
			v |= uint64(b[i*w+k]) << (8 * k)
		}
		seen[v] = struct{}{}
		if len(seen) > limit {
			return false
		}
	}
	return true
}

type parquetWriter struct{ fw *pqarrow.FileWriter }

func (p *parquetWriter) Write(rec arrow.RecordBatch) error {
	// Write makes each record batch one row group.
	return p.fw.Write(rec)
}

func (p *parquetWriter) Close() error { return p.fw.Close() }

// csvWriter writes a header line and one line per row; values as Arrow's
// ValueStr renders them (JSON for nested values, base64 for bytes), nulls
// as empty fields, quoted as encoding/csv quotes fields (csvText).
type csvWriter struct {
	bw   *bufio.Writer
	line []byte
	cols []textCol
}

func newCSVWriter(w io.Writer, schema *arrow.Schema) (*csvWriter, error) {
	bw := bufio.NewWriterSize(w, 256<<10)
	var line []byte
	for i, f := range schema.Fields() {
		if i > 0 {
			line = append(line, ',')
		}
		line = appendCSVField(line, f.Name)
	}
	line = append(line, '\n')
	if _, err := bw.Write(line); err != nil {
		return nil, err
	}
	return &csvWriter{bw: bw}, nil
}

func (c *csvWriter) Write(rec arrow.RecordBatch) error {
	arrs := rec.Columns()
	c.cols = c.cols[:0]
	for _, a := range arrs {
		c.cols = append(c.cols, csvText(a))
	}
	for r := 0; r < int(rec.NumRows()); r++ {
		line := c.line[:0]
		var err error
		for j, col := range arrs {
			if j > 0 {
				line = append(line, ',')
			}
			if col.IsNull(r) {
				continue
			}
			if line, err = c.cols[j](line, r); err != nil {
				return err
			}
		}
		line = append(line, '\n')
		c.line = line
		if _, err := c.bw.Write(line); err != nil {
			return err
		}
	}
	return nil
}

func (c *csvWriter) Close() error { return c.bw.Flush() }

// jsonWriter writes one JSON object per row, keys in column order, values
// as encoding/json marshals Arrow's GetOneForMarshal (timestamps as text,
// bytes as base64, nested values as JSON); see jsonText.
type jsonWriter struct {
	w      *bufio.Writer
	schema *arrow.Schema
	buf    []byte
	names  [][]byte
	cols   []textCol
}

func (j *jsonWriter) Write(rec arrow.RecordBatch) error {
	arrs := rec.Columns()
	if j.names == nil {
		for _, f := range j.schema.Fields() {
			n, _ := json.Marshal(f.Name)
			j.names = append(j.names, append(n, ':'))
		}
	}
	j.cols = j.cols[:0]
	for _, a := range arrs {
		j.cols = append(j.cols, jsonText(a))
	}
	for r := 0; r < int(rec.NumRows()); r++ {
		b := append(j.buf[:0], '{')
		var err error
		for c, col := range arrs {
			if c > 0 {
				b = append(b, ',')
			}
			b = append(b, j.names[c]...)
			if col.IsNull(r) {
				b = append(b, "null"...)
				continue
			}
			if b, err = j.cols[c](b, r); err != nil {
				return fmt.Errorf("column %s: %w", j.schema.Field(c).Name, err)
			}
		}
		b = append(b, '}', '\n')
		j.buf = b
		if _, err := j.w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

func (j *jsonWriter) Close() error { return j.w.Flush() }

// object streams one output object to a store: bytes written go through a
// pipe to Storage.Put, so the object appears whole when Close succeeds
// and never partially (the store's Put contract).
type object struct {
	key  string
	pw   *io.PipeWriter
	n    int64
	done chan struct{}
	res  s3.Written
	err  error
}

func openObject(ctx context.Context, st s3.Storage, key string) *object {
	pr, pw := io.Pipe()
	o := &object{key: key, pw: pw, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		o.res, o.err = s3.PutHashed(ctx, st, key, pr, -1)
		// Unblock the writer if Put stopped reading early.
		pr.CloseWithError(fmt.Errorf("upload of %s ended", key))
	}()
	return o
}

func (o *object) Write(p []byte) (int, error) {
	n, err := o.pw.Write(p)
	o.n += int64(n)
	if err != nil {
		<-o.done
		if o.err != nil {
			return n, o.err
		}
	}
	return n, err
}

// Close finishes the upload and returns what was written.
func (o *object) Close() (s3.Written, error) {
	o.pw.Close()
	<-o.done
	if o.err != nil {
		return s3.Written{}, fmt.Errorf("stateexport: write %s: %w", o.key, o.err)
	}
	return o.res, nil
}

// Abort cancels the upload; nothing is published under the key.
func (o *object) Abort(err error) {
	o.pw.CloseWithError(err)
	<-o.done
}

// encoder writes the row groups of one table file on a goroutine of its
// own: the decoding goroutine hands it whole record batches (write) and
// goes on decoding. Record batches are written in the order handed over,
// so the file's bytes do not depend on timing. Columnar row groups come
// with their colSet, which the encoder resets and returns for reuse once
// the batch is written; at most two exist per table (one being filled,
// one being written), which bounds memory.
type encoder struct {
	key    string
	obj    *object
	schema *arrow.Schema
	o      Options
	jobs   chan encJob
	done   chan struct{}
	free   chan *colSet
	sets   int
	closed bool
	rw     recordWriter

	mu  sync.Mutex
	err error
}

type encJob struct {
	rec arrow.RecordBatch
	set *colSet
}

// maxColSets is the number of colSets per table.
const maxColSets = 2

func startEncoder(key string, obj *object, schema *arrow.Schema, o Options) *encoder {
	e := &encoder{key: key, obj: obj, schema: schema, o: o, jobs: make(chan encJob, 1), done: make(chan struct{}), free: make(chan *colSet, maxColSets)}
	go e.run()
	return e
}

func (e *encoder) run() {
	defer close(e.done)
	for j := range e.jobs {
		if e.failed() == nil {
			if err := e.writeRecord(j.rec); err != nil {
				e.mu.Lock()
				e.err = err
				e.mu.Unlock()
			}
		}
		j.rec.Release()
		if j.set != nil {
			j.set.reset()
			e.free <- j.set
		}
	}
}

func (e *encoder) writeRecord(rec arrow.RecordBatch) error {
	if e.rw == nil {
		rw, err := newRecordWriter(e.o.Format, e.obj, e.schema, e.o.Compression, e.o.PlainEncoding, rec)
		if err != nil {
			return err
		}
		e.rw = rw
	}
	return e.rw.Write(rec)
}

func (e *encoder) failed() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// set returns an empty colSet, waiting for the encoder to release one
// when both are in use.
func (e *encoder) set() *colSet {
	select {
	case s := <-e.free:
		return s
	default:
	}
	if e.sets < maxColSets {
		e.sets++
		return newColSet(e.schema)
	}
	return <-e.free
}

// write hands rec (and the colSet its arrays point into, or nil) to the
// encoder; it returns the encoder's first error, if any.
func (e *encoder) write(rec arrow.RecordBatch, set *colSet) error {
	if err := e.failed(); err != nil {
		rec.Release()
		return err
	}
	e.jobs <- encJob{rec: rec, set: set}
	return nil
}

// close waits for the row groups handed over, finishes the file and the
// upload.
func (e *encoder) close() (s3.Written, error) {
	e.closed = true
	close(e.jobs)
	<-e.done
	err := e.err
	if err == nil && e.rw == nil {
		e.rw, err = newRecordWriter(e.o.Format, e.obj, e.schema, e.o.Compression, e.o.PlainEncoding, nil)
	}
	if err == nil {
		err = e.rw.Close()
	}
	if err != nil {
		e.obj.Abort(err)
		return s3.Written{}, fmt.Errorf("%s: %w", e.key, err)
	}
	return e.obj.Close()
}

// abort stops the encoder; nothing is published.
func (e *encoder) abort(err error) {
	if !e.closed {
		e.closed = true
		close(e.jobs)
	}
	<-e.done
	e.obj.Abort(err)
}

func newBufWriter(w io.Writer) *bufio.Writer { return bufio.NewWriterSize(w, 256<<10) }
