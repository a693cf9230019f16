package engine

import (
	"fmt"
	"math"
	"testing"
)

func TestPriorityQueue(t *testing.T) {
	forBackends(t, smallLayout, func(t *testing.T, op *Operator, _ *Clock) {
		pq := mustState(t, op, "pq")
		b := op.NewBundle()
		defer b.Close()
		begin(t, b)
		adds := []struct {
			kg   int
			prio int64
			elem string
		}{{5, 100, "a"}, {9, -7, "neg"}, {1, 100, "b"}, {120, 50, "c"}, {9, 100, "a"}, {5, 100, "a"}}
		for _, a := range adds {
			if err := b.PQAdd(pq, a.kg, a.prio, []byte(a.elem)); err != nil {
				t.Fatal(err)
			}
		}
		commit(t, b)
		begin(t, b)
		// uncommitted changes count: remove c, add an earlier one
		_ = b.PQRemove(pq, 120, 50, []byte("c"))
		_ = b.PQAdd(pq, 3, 60, []byte("d"))
		var got []string
		for i := 0; i < 10; i++ {
			kg, prio, elem, ok, err := b.PQPoll(pq, 100)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			got = append(got, fmt.Sprintf("%d/%d/%s", prio, kg, elem))
		}
		want := "[-7/9/neg 60/3/d 100/5/a 100/9/a 100/1/b]" // priority, element bytes, key group
		if fmt.Sprint(got) != want {
			t.Fatalf("poll order %v, want %s", got, want)
		}
		commit(t, b)
		begin(t, b)
		if _, ok, _ := b.PQPeek(pq); ok {
			t.Fatal("queue not empty after polling everything")
		}
		_ = b.PQAdd(pq, 0, math.MaxInt64, []byte("late"))
		if _, _, _, ok, _ := b.PQPoll(pq, 1000); ok {
			t.Fatal("polled an element above the bound")
		}
		b.Abort()
		v := mustState(t, op, "v")
		begin(t, b)
		if err := b.PQAdd(v, 0, 1, nil); err == nil {
			t.Fatal("PQAdd on a value state accepted")
		}
		b.Abort()
	})
}
