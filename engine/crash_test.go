package engine

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const crashChildEnv = "SFSTATE_ENGINE_CRASH_CHILD"

var crashStates = []StateDesc{{Name: "v", Kind: KindValue}, {Name: "m", Kind: KindMap}}

const crashKeys = 64

// crashBundle applies bundle i (1-based) of the crash workload: both states
// record the sequence number, key i%64 is set to i, key (i+32)%64 deleted.
func crashBundle(b *Bundle, v, m *State, i int, pad []byte) error {
	if err := b.Begin(nil); err != nil {
		return err
	}
	seq := binary.BigEndian.AppendUint64(nil, uint64(i))
	_ = b.Put(v, v.Key(nil, 0, []byte("seq"), nil), seq)
	_ = b.Put(m, m.EntryKey(nil, 1, []byte("seq"), nil, []byte("n")), seq)
	val := append(binary.BigEndian.AppendUint64(nil, uint64(i)), pad...)
	_ = b.Put(v, v.Key(nil, i%crashKeys, []byte(strconv.Itoa(i%crashKeys)), nil), val)
	_ = b.Delete(v, v.Key(nil, (i+32)%crashKeys, []byte(strconv.Itoa((i+32)%crashKeys)), nil))
	return b.Commit()
}

// crashModel is the expected value (the bundle number that last set it, or
// 0 when absent) of each key after k bundles.
func crashModel(k int) [crashKeys]int {
	var m [crashKeys]int
	for i := 1; i <= k; i++ {
		m[i%crashKeys] = i
		m[(i+32)%crashKeys] = 0
	}
	return m
}

func crashOpen(dir string) (Backend, error) {
	return OpenRocksDB(dir, smallLayout, crashStates, RocksOptions{WriteBufferSize: 64 << 10})
}

// crashChild commits bundles forever, flushing every 10th and recording the
// flushed bundle number (fsync'ed) in dir/flushed, until it is killed.
func crashChild(dir string) {
	be, err := crashOpen(filepath.Join(dir, "db"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	op := NewOperator(be, nil)
	v, _ := op.State("v")
	m, _ := op.State("m")
	b := op.NewBundle()
	f, err := os.OpenFile(filepath.Join(dir, "flushed"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		os.Exit(2)
	}
	pad := bytes.Repeat([]byte{7}, 1500)
	for i := 1; i <= 1_000_000; i++ {
		if err := crashBundle(b, v, m, i, pad); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if i%10 == 0 {
			if err := be.Flush(); err != nil {
				os.Exit(2)
			}
			fmt.Fprintf(f, "%d\n", i)
			_ = f.Sync()
		}
	}
	os.Exit(0)
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
	}
	os.Exit(m.Run())
}

func lastFlushed(t *testing.T, path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	last := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if n, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
			last = n
		}
	}
	return last
}

// TestCrashRecovery kills a child process that commits bundles (WAL off)
// and checks the guarantee: the reopened state is exactly the state after
// some bundle k, with k at least the last bundle flushed before the kill.
func TestCrashRecovery(t *testing.T) {
	for round := 0; round < 3; round++ {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			dir := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrashRecovery$")
			cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			want := 30 + 20*round
			deadline := time.Now().Add(60 * time.Second)
			for lastFlushed(t, filepath.Join(dir, "flushed")) < want {
				if time.Now().After(deadline) {
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
					t.Fatalf("child made no progress: %s", stderr.String())
				}
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(time.Duration(round*7) * time.Millisecond)
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			flushed := lastFlushed(t, filepath.Join(dir, "flushed"))

			be, err := crashOpen(filepath.Join(dir, "db"))
			if err != nil {
				t.Fatalf("reopen after kill: %v", err)
			}
			defer be.Close()
			op := NewOperator(be, nil)
			v, _ := op.State("v")
			m, _ := op.State("m")
			seqOf := func(s *State, key []byte) int {
				p, ok, err := s.Get(key)
				if err != nil || !ok {
					t.Fatalf("sequence key missing in %s: %v", s.Desc().Name, err)
				}
				return int(binary.BigEndian.Uint64(p))
			}
			k := seqOf(v, v.Key(nil, 0, []byte("seq"), nil))
			if k2 := seqOf(m, m.EntryKey(nil, 1, []byte("seq"), nil, []byte("n"))); k2 != k {
				t.Fatalf("column families disagree: bundle %d vs %d (flush not atomic)", k, k2)
			}
			if k < flushed {
				t.Fatalf("recovered bundle %d is older than the last flushed bundle %d", k, flushed)
			}
			model := crashModel(k)
			for j := 0; j < crashKeys; j++ {
				p, ok, err := v.Get(v.Key(nil, j, []byte(strconv.Itoa(j)), nil))
				if err != nil {
					t.Fatal(err)
				}
				got := 0
				if ok {
					got = int(binary.BigEndian.Uint64(p))
				}
				if got != model[j] {
					t.Fatalf("key %d = bundle %d, want %d (state is not the state after bundle %d)", j, got, model[j], k)
				}
			}
			t.Logf("killed after flush of bundle %d; recovered exactly the state after bundle %d", flushed, k)
		})
	}
}
