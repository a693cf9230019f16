package stateexport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
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

func newRecordWriter(f Format, w io.Writer, schema *arrow.Schema, c Compression) (recordWriter, error) {
	switch f {
	case Parquet:
		codec, err := c.codec()
		if err != nil {
			return nil, err
		}
		opts := []parquet.WriterProperty{
			parquet.WithCompression(codec),
			parquet.WithStats(true),
			// Dictionaries pay for strings and bytes (operator ids, names,
			// enum-like values); numbers and times, mostly distinct in
			// state, only cost the hashing.
			parquet.WithDictionaryDefault(false),
			// Row groups are cut by the exporter (one per record batch).
			parquet.WithMaxRowGroupLength(1 << 40),
			parquet.WithCreatedBy("sfstate export"),
		}
		for _, p := range dictionaryColumns(schema) {
			opts = append(opts, parquet.WithDictionaryFor(p, true))
		}
		props := parquet.NewWriterProperties(opts...)
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
		return &jsonWriter{w: bufio.NewWriterSize(w, 64<<10), schema: schema}, nil
	}
	return nil, fmt.Errorf("stateexport: unknown format %q", f)
}

// dictionaryColumns lists the dotted Parquet paths of the top-level string
// and binary columns.
func dictionaryColumns(schema *arrow.Schema) []string {
	var out []string
	for _, f := range schema.Fields() {
		switch f.Type.ID() {
		case arrow.STRING, arrow.BINARY:
			out = append(out, f.Name)
		}
	}
	return out
}

type parquetWriter struct{ fw *pqarrow.FileWriter }

func (p *parquetWriter) Write(rec arrow.RecordBatch) error {
	// Write makes each record batch one row group.
	return p.fw.Write(rec)
}

func (p *parquetWriter) Close() error { return p.fw.Close() }

// csvWriter writes a header line and one line per row; nested and binary
// values are rendered by Arrow's ValueStr (JSON for nested values, base64
// for bytes), nulls as empty fields.
type csvWriter struct {
	bw *bufio.Writer
	cw *csv.Writer
}

func newCSVWriter(w io.Writer, schema *arrow.Schema) (*csvWriter, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	cw := csv.NewWriter(bw)
	hdr := make([]string, schema.NumFields())
	for i, f := range schema.Fields() {
		hdr[i] = f.Name
	}
	if err := cw.Write(hdr); err != nil {
		return nil, err
	}
	return &csvWriter{bw: bw, cw: cw}, nil
}

func (c *csvWriter) Write(rec arrow.RecordBatch) error {
	row := make([]string, rec.NumCols())
	cols := rec.Columns()
	for r := 0; r < int(rec.NumRows()); r++ {
		for j, col := range cols {
			if col.IsNull(r) {
				row[j] = ""
			} else {
				row[j] = col.ValueStr(r)
			}
		}
		if err := c.cw.Write(row); err != nil {
			return err
		}
	}
	return nil
}

func (c *csvWriter) Close() error {
	c.cw.Flush()
	if err := c.cw.Error(); err != nil {
		return err
	}
	return c.bw.Flush()
}

// jsonWriter writes one JSON object per row, keys in column order, values
// as Arrow marshals them (GetOneForMarshal: timestamps as text, bytes as
// base64, nested values as JSON).
type jsonWriter struct {
	w      *bufio.Writer
	schema *arrow.Schema
	buf    bytes.Buffer
}

func (j *jsonWriter) Write(rec arrow.RecordBatch) error {
	cols := rec.Columns()
	names := make([][]byte, len(cols))
	for i, f := range j.schema.Fields() {
		names[i], _ = json.Marshal(f.Name)
	}
	for r := 0; r < int(rec.NumRows()); r++ {
		j.buf.Reset()
		j.buf.WriteByte('{')
		for c, col := range cols {
			if c > 0 {
				j.buf.WriteByte(',')
			}
			j.buf.Write(names[c])
			j.buf.WriteByte(':')
			v, err := json.Marshal(col.GetOneForMarshal(r))
			if err != nil {
				return fmt.Errorf("column %s: %w", j.schema.Field(c).Name, err)
			}
			j.buf.Write(v)
		}
		j.buf.WriteString("}\n")
		if _, err := j.w.Write(j.buf.Bytes()); err != nil {
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
