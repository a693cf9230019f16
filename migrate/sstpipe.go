//go:build cgo

package migrate

import (
	"fmt"
	"path/filepath"
	"sync/atomic"

	"github.com/sfstate/sfstate/engine"
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
	cur     *engine.Frames // being filled by the caller
	work    chan *engine.Frames
	free    chan *engine.Frames
	done    chan struct{}
	failed  atomic.Bool
	closed  bool

	// owned by the writer goroutine until done
	err    error
	files  []string
	writer *engine.SSTWriter
	open   bool // writer has a file open
	size   int64
}

func newSSTPipe(dir string, target int64, bufSize int) *sstPipe {
	p := &sstPipe{dir: dir, target: target, bufSize: bufSize,
		work: make(chan *engine.Frames, 1), free: make(chan *engine.Frames, 1), done: make(chan struct{})}
	p.cur = engine.NewFrames(bufSize)
	p.free <- engine.NewFrames(bufSize)
	go p.loop()
	return p
}

// put appends one record whose key is k followed by row.
func (p *sstPipe) put(k, row, v []byte) error {
	n := len(k) + len(row) + len(v)
	if p.cur.Len() > 0 && p.cur.Size()+8+n > p.bufSize {
		if err := p.send(); err != nil {
			return err
		}
	}
	p.cur.AddJoined(k, row, v)
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
	if !p.closed && p.cur.Len() > 0 {
		p.work <- p.cur
		p.cur = &engine.Frames{}
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
		f.Reset()
		select {
		case p.free <- f:
		default: // the final buffer: nobody takes it
		}
	}
	if p.writer != nil {
		if p.open {
			if err := p.writer.Finish(); p.err == nil {
				p.err = err
			}
		}
		p.writer.Close()
		p.writer = nil
	}
}

func (p *sstPipe) write(f *engine.Frames) error {
	if !p.open || p.size >= p.target {
		if p.open {
			p.open = false
			if err := p.writer.Finish(); err != nil {
				return err
			}
		}
		if p.writer == nil {
			// LZ4 and 16 KiB blocks: against Snappy and 4 KiB blocks they
			// cut the CPU of writing and of the verifying read-back by a
			// fifth at 256-byte rows (migratebench.BenchmarkCheckpoint); RocksDB reads
			// any block size and compression, and compactions rewrite the
			// files with the engine's own settings
			p.writer = engine.NewSSTWriter(engine.SSTOptions{Compression: engine.CompressionLZ4, BlockSize: sstBlockSize})
		}
		path := filepath.Join(p.dir, fmt.Sprintf("records-%06d.sst", len(p.files)))
		if err := p.writer.Open(path); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		p.open = true
		p.files = append(p.files, path)
		p.size = 0
	}
	p.size += int64(f.Size() - 8*f.Len())
	return p.writer.PutFrames(f)
}
