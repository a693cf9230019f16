//go:build cgo

package migrate

import (
	"fmt"
	"path/filepath"
	"sync/atomic"

	"github.com/linxGnu/grocksdb"
)

// sstBlockSize is the data block size of the migrated record SST files.
const sstBlockSize = 16 << 10

// sstPipe writes the migrated records with RocksDB's SST writer on a
// goroutine of its own, so that building, compressing and writing the
// files overlaps with reading and converting the buckets (the caller):
// two frame buffers take turns, each handed over with one channel send
// and written with one C call. Files roll over at the target size between
// batches.
type sstPipe struct {
	dir     string
	target  int64
	bufSize int
	cur     *frameBuf // being filled by the caller
	work    chan *frameBuf
	free    chan *frameBuf
	done    chan struct{}
	failed  atomic.Bool
	closed  bool

	// owned by the writer goroutine until done
	err     error
	files   []string
	writer  *grocksdb.SSTFileWriter
	envOpts *grocksdb.EnvOptions
	wopts   *grocksdb.Options
	topts   *grocksdb.BlockBasedTableOptions
	size    int64
}

func newSSTPipe(dir string, target int64, bufSize int) *sstPipe {
	p := &sstPipe{dir: dir, target: target, bufSize: bufSize,
		work: make(chan *frameBuf, 1), free: make(chan *frameBuf, 1), done: make(chan struct{})}
	p.cur = &frameBuf{b: make([]byte, 0, bufSize)}
	p.free <- &frameBuf{b: make([]byte, 0, bufSize)}
	go p.loop()
	return p
}

// put appends one record whose key is k followed by row.
func (p *sstPipe) put(k, row, v []byte) error {
	n := len(k) + len(row) + len(v)
	if p.cur.n > 0 && len(p.cur.b)+8+n > p.bufSize {
		if err := p.send(); err != nil {
			return err
		}
	}
	p.cur.add3(k, row, v)
	return nil
}

// send hands the filled buffer to the writer and takes the other one.
func (p *sstPipe) send() error {
	p.work <- p.cur
	p.cur = <-p.free
	if p.failed.Load() {
		return fmt.Errorf("SST writer: %w", p.closeErr())
	}
	return nil
}

// closeErr stops the writer and returns its error.
func (p *sstPipe) closeErr() error {
	if !p.closed {
		p.closed = true
		close(p.work)
		<-p.done
	}
	return p.err
}

// close writes what is buffered, finishes the last file and returns the
// files written. It may be called again (after an error, to clean up).
func (p *sstPipe) close() ([]string, error) {
	if !p.closed && p.cur.n > 0 {
		p.work <- p.cur
		p.cur = &frameBuf{}
	}
	if err := p.closeErr(); err != nil {
		return nil, fmt.Errorf("SST writer: %w", err)
	}
	return p.files, nil
}

func (p *sstPipe) loop() {
	defer close(p.done)
	for f := range p.work {
		if p.err == nil {
			if p.err = p.write(f); p.err != nil {
				p.failed.Store(true)
			}
		}
		f.reset()
		select {
		case p.free <- f:
		default: // the final buffer: nobody takes it
		}
	}
	if p.writer != nil {
		if err := p.writer.Finish(); p.err == nil {
			p.err = err
		}
		p.writer.Destroy()
		p.writer = nil
	}
	if p.envOpts != nil {
		p.envOpts.Destroy()
		p.wopts.Destroy()
		p.topts.Destroy()
	}
}

func (p *sstPipe) write(f *frameBuf) error {
	if p.writer == nil || p.size >= p.target {
		if p.writer != nil {
			err := p.writer.Finish()
			p.writer.Destroy()
			p.writer = nil
			if err != nil {
				return err
			}
		}
		if p.envOpts == nil {
			p.envOpts = grocksdb.NewDefaultEnvOptions()
			p.wopts = grocksdb.NewDefaultOptions()
			// LZ4 and 16 KiB blocks: against Snappy and 4 KiB blocks they
			// cut the CPU of writing and of the verifying read-back by a
			// fifth at 256-byte rows (BenchmarkCheckpoint); RocksDB reads
			// any block size and compression, and compactions rewrite the
			// files with the engine's own settings
			p.wopts.SetCompression(grocksdb.LZ4Compression)
			p.topts = grocksdb.NewDefaultBlockBasedTableOptions()
			p.topts.SetBlockSize(sstBlockSize)
			p.wopts.SetBlockBasedTableFactory(p.topts)
		}
		p.writer = grocksdb.NewSSTFileWriter(p.envOpts, p.wopts)
		path := filepath.Join(p.dir, fmt.Sprintf("records-%06d.sst", len(p.files)))
		if err := p.writer.Open(path); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		p.files = append(p.files, path)
		p.size = 0
	}
	p.size += int64(len(f.b) - 8*f.n)
	return sstPutBatch(p.writer, f)
}
