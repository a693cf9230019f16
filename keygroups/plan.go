package keygroups

// Piece is the part of one old subtask's keyed state that a new subtask
// restores: the old handle, cut down to Range.
type Piece struct {
	OldSubtask int   `json:"oldSubtask"`
	Range      Range `json:"keyGroups"`
}

// Assignment is what one new subtask restores: its own key-group range and
// the pieces of old handles covering it, ordered by old subtask (which is
// also key-group order, Flink's order of the restored handles).
type Assignment struct {
	Subtask int     `json:"subtask"`
	Range   Range   `json:"keyGroups"`
	Pieces  []Piece `json:"pieces"`
}

// OldSubtasks lists the old subtasks whose handles this subtask must read.
func (a Assignment) OldSubtasks() []int {
	out := make([]int, len(a.Pieces))
	for i, p := range a.Pieces {
		out[i] = p.OldSubtask
	}
	return out
}

// RescalePlan maps the keyed state of P old subtasks onto P' new ones under
// a fixed max parallelism (what StateAssignmentOperation does for keyed
// state on restore).
type RescalePlan struct {
	MaxParallelism int          `json:"maxParallelism"`
	OldParallelism int          `json:"oldParallelism"`
	NewParallelism int          `json:"newParallelism"`
	Subtasks       []Assignment `json:"subtasks"`
}

// Plan computes the rescale plan from oldP to newP subtasks. Both must
// satisfy CheckParallelism against maxParallelism. New subtask j receives,
// for every old subtask i whose range intersects j's range, the piece
// (i, intersection); every key group appears in exactly one piece. With
// oldP == newP each subtask keeps its own handle whole.
func Plan(maxParallelism, oldP, newP int) (*RescalePlan, error) {
	if err := CheckParallelism(maxParallelism, oldP); err != nil {
		return nil, err
	}
	if err := CheckParallelism(maxParallelism, newP); err != nil {
		return nil, err
	}
	plan := &RescalePlan{
		MaxParallelism: maxParallelism,
		OldParallelism: oldP,
		NewParallelism: newP,
		Subtasks:       make([]Assignment, newP),
	}
	for j := range newP {
		r := RangeForSubtask(maxParallelism, newP, j)
		a := Assignment{Subtask: j, Range: r}
		// Old ranges are contiguous and ordered, so only the owners of r's
		// first and last key group and those in between intersect r.
		first := SubtaskForKeyGroup(maxParallelism, oldP, r.Start)
		last := SubtaskForKeyGroup(maxParallelism, oldP, r.End)
		for i := first; i <= last; i++ {
			if x := RangeForSubtask(maxParallelism, oldP, i).Intersect(r); !x.IsEmpty() {
				a.Pieces = append(a.Pieces, Piece{OldSubtask: i, Range: x})
			}
		}
		plan.Subtasks[j] = a
	}
	return plan, nil
}

// Readers lists, for every old subtask, the new subtasks that read part of
// its handle (index = old subtask). An old handle read by nobody cannot
// occur: every key group has a new owner.
func (p *RescalePlan) Readers() [][]int {
	out := make([][]int, p.OldParallelism)
	for _, a := range p.Subtasks {
		for _, pc := range a.Pieces {
			out[pc.OldSubtask] = append(out[pc.OldSubtask], a.Subtask)
		}
	}
	return out
}

// Identity reports whether the plan keeps every handle as it is (same
// parallelism).
func (p *RescalePlan) Identity() bool { return p.OldParallelism == p.NewParallelism }
