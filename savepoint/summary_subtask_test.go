package savepoint

import "testing"

// Bytes per subtask add up to the operator's bytes without its coordinator
// state, one row per subtask with state, ascending.
func TestSummarySubtaskBytes(t *testing.T) {
	for _, name := range []string{"flink1.20-hashmap-canonical-liststate-window-inline", "flink1.20-rocksdb-NATIVE-incremental-for-contrast", "sql-rocksdb-canonical-join-mapstate"} {
		sp := openFixture(t, name)
		sum := Summarize(sp)
		for i, os := range sum.Operators {
			op := sp.Meta.Operators[i]
			if len(os.SubtaskBytes) != os.SubtasksWithState {
				t.Fatalf("%s %s: %d subtask rows for %d subtasks with state", name, os.ID, len(os.SubtaskBytes), os.SubtasksWithState)
			}
			var total int64
			for j, sb := range os.SubtaskBytes {
				if j > 0 && sb.Subtask <= os.SubtaskBytes[j-1].Subtask {
					t.Fatalf("%s %s: subtasks out of order: %v", name, os.ID, os.SubtaskBytes)
				}
				if st := op.Subtask(sb.Subtask); st == nil {
					t.Fatalf("%s %s: no subtask %d", name, os.ID, sb.Subtask)
				}
				total += sb.Bytes
			}
			want := os.Bytes
			if op.Coordinator != nil {
				want -= max(op.Coordinator.Len(), 0)
			}
			if total != want {
				t.Errorf("%s %s: subtasks hold %d bytes, operator %d without coordinator", name, os.ID, total, want)
			}
		}
	}
}
