package savepoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// Keyed data layouts of an operator's keyed handles.
const (
	LayoutCanonical     = "canonical"      // tag 7 (or 3/12 with the full-snapshot layout)
	LayoutNativeHeap    = "native-heap"    // tag 12/3 from the hashmap backend
	LayoutNativeRocksDB = "native-rocksdb" // tag 5/11 (SST files)
	LayoutMixed         = "mixed"
	// LayoutChangelog: changelog handles (tags 8/14) without materialized
	// state; all keyed state is in the state-change log.
	LayoutChangelog = "changelog"
)

// Summary describes a savepoint for `inspect`.
type Summary struct {
	Source string `json:"source"`
	// Picked tells which checkpoint was chosen when the location was a
	// job's checkpoint directory or a checkpoint root.
	Picked *Picked `json:"picked,omitempty"`
	// Sources are the recorded source directories whose files the
	// savepoint references (see SourcesName).
	Sources         []string `json:"sources,omitempty"`
	MetadataVersion int      `json:"metadataVersion"`
	CheckpointID    int64    `json:"checkpointId"`
	FormatType      string   `json:"formatType"`
	// FormatInferred is set when FormatType was not recorded (V3
	// metadata has no checkpoint-properties trailer) but inferred from the
	// keyed handles: incremental handles (tags 5/11) mean NATIVE, key-group
	// handles whose streams use the canonical layout mean CANONICAL.
	FormatInferred       bool   `json:"formatInferred,omitempty"`
	SnapshotName         string `json:"snapshotName,omitempty"`
	PostCheckpointAction string `json:"postCheckpointAction,omitempty"`
	MetadataBytes        int64  `json:"metadataBytes"`
	// TotalBytes is the size of all state: distinct files plus inline data.
	TotalBytes  int64              `json:"totalBytes"`
	Files       int                `json:"files"`
	InlineBytes int64              `json:"inlineBytes"`
	Operators   []*OperatorSummary `json:"operators"`
	// Scanned is set once keyed data was decoded (entry counts are valid).
	Scanned bool `json:"scanned"`
	// TTL settings used for the expired counts (0 = not asked).
	TTLMillis int64 `json:"ttlMillis,omitempty"`
	NowMillis int64 `json:"nowMillis,omitempty"`
	// Notes holds warnings, e.g. why keyed data was not decoded.
	Notes []string `json:"notes,omitempty"`
}

// OperatorSummary describes one operator.
type OperatorSummary struct {
	ID                string                  `json:"id"`
	UID               string                  `json:"uid,omitempty"`
	Name              string                  `json:"name,omitempty"`
	Parallelism       int                     `json:"parallelism"`
	MaxParallelism    int                     `json:"maxParallelism"`
	SubtasksWithState int                     `json:"subtasksWithState"`
	FinishedSubtasks  int                     `json:"finishedSubtasks,omitempty"`
	FullyFinished     bool                    `json:"fullyFinished,omitempty"`
	Bytes             int64                   `json:"bytes"`
	KeyedLayout       string                  `json:"keyedLayout,omitempty"`
	KeyedTags         []int                   `json:"keyedTags,omitempty"`
	KeyedBytes        int64                   `json:"keyedBytes"`
	OperatorBytes     int64                   `json:"operatorStateBytes"`
	NativeFiles       []FileSummary           `json:"nativeFiles,omitempty"`
	Changelog         *ChangelogSummary       `json:"changelog,omitempty"`
	OperatorStates    []*OperatorStateSummary `json:"operatorStates,omitempty"`
	KeyedStates       []*StateSummary         `json:"keyedStates,omitempty"`
	KeyGroups         *KeyGroupDist           `json:"keyGroups,omitempty"`
	Note              string                  `json:"note,omitempty"`
	// SubtaskBytes gives, per subtask with state (ascending by index), the
	// bytes its handles record; a file a subtask references twice counts
	// once. For reports (skew between subtasks), not part of the JSON.
	SubtaskBytes []SubtaskBytes `json:"-"`
}

// SubtaskBytes is the recorded state size of one subtask.
type SubtaskBytes struct {
	Subtask int
	Bytes   int64
}

// FileSummary is one file of a native (RocksDB) keyed handle.
type FileSummary struct {
	Subtask int    `json:"subtask"`
	Name    string `json:"name"`
	Bytes   int64  `json:"bytes"`
	Shared  bool   `json:"shared,omitempty"`
}

// ChangelogSummary describes an operator's changelog handles (tags 8/14):
// the materialized keyed handles (counted in KeyedTags, NativeFiles and the
// layout like plain handles) and the state-change logs written since.
type ChangelogSummary struct {
	// Handles is the number of changelog handles (one per subtask).
	Handles int `json:"handles"`
	// MaterializedHandles counts the materialized keyed handles.
	MaterializedHandles int `json:"materializedHandles"`
	// MaterializationIDs lists the distinct materialization ids, ascending
	// (0 = nothing materialized yet).
	MaterializationIDs []int64 `json:"materializationIds"`
	// ChangeLogs counts the non-materialized handles; InlineChanges and
	// InlineBytes the changes held in the metadata (tag 9).
	ChangeLogs    int   `json:"changeLogs"`
	InlineChanges int   `json:"inlineChanges"`
	InlineBytes   int64 `json:"inlineBytes"`
	// Files lists the change-log streams of file handles (tags 10/13),
	// one row per (subtask, stream); FileBytes sums their recorded sizes.
	Files     []FileSummary `json:"files,omitempty"`
	FileBytes int64         `json:"fileBytes"`
	// CheckpointedBytes sums the handles' checkpointed sizes.
	CheckpointedBytes int64 `json:"checkpointedBytes"`
	// States counts the logged data changes per state (by name), from the
	// inline changes (Summarize) and the change-log files (ScanSummary).
	States []*ChangelogStateSummary `json:"states,omitempty"`
	// MetadataChanges counts the metadata changes (state registrations).
	MetadataChanges int `json:"metadataChanges"`
	// Undecoded counts changes whose frame did not decode; Problem is the
	// first such error.
	Undecoded int    `json:"undecoded,omitempty"`
	Problem   string `json:"problem,omitempty"`
}

// String is a one-line description for notes.
func (c *ChangelogSummary) String() string {
	s := fmt.Sprintf("changelog state backend: %d handles, %d materialized handles (materialization ids %v), %d state-change logs: %d inline changes (%d B), %d change-log files (%d B)",
		c.Handles, c.MaterializedHandles, c.MaterializationIDs, c.ChangeLogs, c.InlineChanges, c.InlineBytes, len(c.Files), c.FileBytes)
	if len(c.States) > 0 {
		s += "; changes by state: " + c.statesString()
	}
	if c.Undecoded > 0 {
		s += fmt.Sprintf("; %d changes not decoded (first: %s)", c.Undecoded, c.Problem)
	}
	return s
}

// OperatorStateSummary is one named operator (non-keyed) state.
type OperatorStateSummary struct {
	Name string `json:"name"`
	Mode string `json:"mode"`
	// Type is the element type (list states) or MAP<key, value>
	// (broadcast states), from the stream header (after ScanSummary).
	Type string `json:"type,omitempty"`
	// MapEntries is the size of a broadcast map (each subtask holds a full
	// copy), -1 when unknown.
	MapEntries int `json:"mapEntries,omitempty"`
	Elements   int `json:"elements"`
	Subtasks   int `json:"subtasks"`
	// Partial says why the state's serializer could not be read (after
	// ScanSummary); its elements are then not decoded.
	Partial string `json:"partial,omitempty"`
}

// StateSummary is one keyed state of an operator.
type StateSummary struct {
	Name          string        `json:"name"`
	Kind          string        `json:"kind"`
	KeyType       string        `json:"keyType"`
	NamespaceType string        `json:"namespaceType,omitempty"`
	UserKeyType   string        `json:"userKeyType,omitempty"`
	ValueType     string        `json:"valueType"`
	TTL           bool          `json:"ttl"`
	Entries       int64         `json:"entries"`
	Bytes         int64         `json:"bytes"`
	KeyGroups     *KeyGroupDist `json:"keyGroups,omitempty"`
	// Partial says why some of the state's serializers could not be read
	// (its entries are counted but not decoded); empty when all were.
	Partial string `json:"partial,omitempty"`
	// TTL ages: last-access timestamps (epoch millis).
	TTLEntries int64  `json:"ttlEntries,omitempty"`
	TTLOldest  *int64 `json:"ttlOldest,omitempty"`
	TTLNewest  *int64 `json:"ttlNewest,omitempty"`
	Expired    int64  `json:"expired,omitempty"`
	// TTLAges is a histogram of entry ages (now - last access).
	TTLAges []AgeBucket `json:"ttlAges,omitempty"`
}

// AgeBucket counts TTL entries whose age is below MaxAgeMillis (and not
// below the previous bucket's bound). The last bucket is open-ended.
type AgeBucket struct {
	Label        string `json:"label"`
	MaxAgeMillis int64  `json:"maxAgeMillis"`
	Entries      int64  `json:"entries"`
}

// MarshalJSON leaves out the open-ended last bucket's bound: math.MaxInt64
// is beyond the integers JSON readers that use doubles keep exact.
func (b AgeBucket) MarshalJSON() ([]byte, error) {
	type plain AgeBucket
	var v any = plain(b)
	if b.MaxAgeMillis == math.MaxInt64 {
		v = struct {
			Label   string `json:"label"`
			Entries int64  `json:"entries"`
		}{b.Label, b.Entries}
	}
	// Labels hold '<' and '>': keep them readable.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// ageBounds are the TTL age histogram buckets.
var ageBounds = []AgeBucket{
	{Label: "future", MaxAgeMillis: 0},
	{Label: "< 1 min", MaxAgeMillis: 60e3},
	{Label: "< 1 h", MaxAgeMillis: 3600e3},
	{Label: "< 1 day", MaxAgeMillis: 86400e3},
	{Label: "< 7 days", MaxAgeMillis: 7 * 86400e3},
	{Label: "< 30 days", MaxAgeMillis: 30 * 86400e3},
	{Label: "< 1 year", MaxAgeMillis: 365 * 86400e3},
	{Label: ">= 1 year", MaxAgeMillis: math.MaxInt64},
}

func (s *StateSummary) addAge(age int64) {
	if s.TTLAges == nil {
		s.TTLAges = append([]AgeBucket(nil), ageBounds...)
	}
	for i := range s.TTLAges {
		if age < s.TTLAges[i].MaxAgeMillis {
			s.TTLAges[i].Entries++
			return
		}
	}
}

// KeyGroupDist is a distribution of entries over key groups.
type KeyGroupDist struct {
	// KeyGroups is the number of key groups covered by the handles.
	KeyGroups int `json:"covered"`
	// NonEmpty is the number of key groups with at least one entry.
	NonEmpty int   `json:"nonEmpty"`
	Min      int64 `json:"min"`
	Median   int64 `json:"median"`
	Max      int64 `json:"max"`
	// Hottest lists up to 5 key groups with the most entries.
	Hottest []KeyGroupCount `json:"hottest,omitempty"`
	// Counts holds every non-empty key group's entry count, ascending by
	// key group (used by reports).
	Counts []KeyGroupCount `json:"counts,omitempty"`
}

// KeyGroupCount is an entry count of one key group.
type KeyGroupCount struct {
	KeyGroup int   `json:"keyGroup"`
	Entries  int64 `json:"entries"`
}

// NewKeyGroupDist builds a distribution from per-key-group counts over
// total key groups (empty key groups count as 0 for min/median): min,
// median, max, the counts sorted by key group and the five hottest.
func NewKeyGroupDist(counts map[int]int64, total int) *KeyGroupDist {
	d := &KeyGroupDist{KeyGroups: total, NonEmpty: len(counts)}
	vals := make([]int64, 0, total)
	for kg, n := range counts {
		d.Counts = append(d.Counts, KeyGroupCount{kg, n})
		vals = append(vals, n)
	}
	for len(vals) < total {
		vals = append(vals, 0)
	}
	sort.Slice(d.Counts, func(i, j int) bool { return d.Counts[i].KeyGroup < d.Counts[j].KeyGroup })
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	if len(vals) > 0 {
		d.Min, d.Max = vals[0], vals[len(vals)-1]
		d.Median = vals[(len(vals)-1)/2]
	}
	hot := append([]KeyGroupCount(nil), d.Counts...)
	sort.SliceStable(hot, func(i, j int) bool { return hot[i].Entries > hot[j].Entries })
	if len(hot) > 5 {
		hot = hot[:5]
	}
	d.Hottest = hot
	return d
}

// Summarize describes the savepoint from its metadata alone (no state file
// is read except for sizes recorded in handles).
func Summarize(sp *Savepoint) *Summary {
	md := sp.Meta
	s := &Summary{
		Source:          sp.Name(),
		MetadataVersion: md.Version,
		CheckpointID:    md.CheckpointID,
		FormatType:      "UNKNOWN",
		MetadataBytes:   sp.MetadataSize,
		Picked:          sp.Located,
		Sources:         sp.Sources(),
	}
	if sp.Props != nil {
		if sp.Props.FormatType != "" {
			s.FormatType = sp.Props.FormatType
		} else if !sp.Props.IsSavepoint() {
			s.FormatType = "CHECKPOINT"
		}
		s.SnapshotName = sp.Props.Name
		s.PostCheckpointAction = sp.Props.PostCheckpointAction
	} else if sp.PropsErr != nil {
		s.Notes = append(s.Notes, fmt.Sprintf("checkpoint properties unreadable: %v", sp.PropsErr))
	}
	files := map[string]bool{}
	for _, op := range md.Operators {
		os := &OperatorSummary{
			ID:             op.ID.String(),
			UID:            op.UID,
			Name:           op.Name,
			Parallelism:    int(op.Parallelism),
			MaxParallelism: int(op.MaxParallelism),
			FullyFinished:  op.FullyFinished,
		}
		opFiles := map[string]bool{}
		var stFiles map[string]bool // files of the current subtask
		var stBytes *SubtaskBytes
		add := func(h *StreamHandle, keyed bool) {
			if h == nil {
				return
			}
			n := h.Len()
			if n < 0 {
				n = 0
			}
			isFile := h.Tag == TagFile || h.Tag == TagRelativeFile || h.Tag == TagSegmentFile
			if stBytes != nil && (!isFile || !stFiles[h.Describe()]) {
				stBytes.Bytes += n
				if isFile {
					stFiles[h.Describe()] = true
				}
			}
			if isFile {
				id := h.Describe()
				if !files[id] {
					files[id] = true
					s.Files++
					s.TotalBytes += n
				}
				if opFiles[id] {
					return
				}
				opFiles[id] = true
			} else {
				s.InlineBytes += n
				s.TotalBytes += n
			}
			os.Bytes += n
			if keyed {
				os.KeyedBytes += n
			} else {
				os.OperatorBytes += n
			}
		}
		add(op.Coordinator, false)
		opStates := map[string]*OperatorStateSummary{}
		var opOrder []string
		tags := map[int]bool{}
		for _, st := range op.Subtasks {
			if st.Finished {
				os.FinishedSubtasks++
				continue
			}
			stBytes, stFiles = &SubtaskBytes{Subtask: st.Index}, map[string]bool{}
			has := false
			for _, oh := range []*OperatorHandle{st.ManagedOperator, st.RawOperator} {
				if oh == nil {
					continue
				}
				has = true
				add(oh.Delegate, false)
				for _, m := range oh.States {
					x := opStates[m.Name]
					if x == nil {
						x = &OperatorStateSummary{Name: m.Name, Mode: ModeName(m.Mode)}
						opStates[m.Name] = x
						opOrder = append(opOrder, m.Name)
					}
					x.Subtasks++
					if m.Mode == ModeBroadcast {
						// Every subtask holds a full copy of broadcast state.
						x.Elements = max(x.Elements, len(m.Offsets))
					} else {
						x.Elements += len(m.Offsets)
					}
				}
			}
			var keyedHandles []KeyedHandle
			for _, kh := range []KeyedHandle{st.ManagedKeyed, st.RawKeyed} {
				if c, ok := kh.(*ChangelogHandle); ok {
					tags[int(c.Tag)] = true
					has = true
					if os.Changelog == nil {
						os.Changelog = &ChangelogSummary{}
					}
					summarizeChangelog(os.Changelog, st.Index, c, func(h *StreamHandle) { add(h, true) })
				}
				keyedHandles = append(keyedHandles, MaterializedKeyed(kh)...)
			}
			for _, kh := range keyedHandles {
				has = true
				tags[int(kh.HandleTag())] = true
				switch h := kh.(type) {
				case *KeyGroupsHandle:
					add(h.Delegate, true)
				case *IncrementalHandle:
					add(h.Meta, true)
					for _, ns := range h.Shared {
						add(ns.Handle, true)
						os.NativeFiles = append(os.NativeFiles, FileSummary{Subtask: st.Index, Name: ns.Name, Bytes: ns.Handle.Len(), Shared: true})
					}
					for _, ns := range h.Private {
						add(ns.Handle, true)
						os.NativeFiles = append(os.NativeFiles, FileSummary{Subtask: st.Index, Name: ns.Name, Bytes: ns.Handle.Len()})
					}
				}
			}
			if has {
				os.SubtasksWithState++
				os.SubtaskBytes = append(os.SubtaskBytes, *stBytes)
			}
		}
		stBytes = nil
		sort.Slice(os.SubtaskBytes, func(i, j int) bool { return os.SubtaskBytes[i].Subtask < os.SubtaskBytes[j].Subtask })
		for _, n := range opOrder {
			os.OperatorStates = append(os.OperatorStates, opStates[n])
		}
		for t := range tags {
			os.KeyedTags = append(os.KeyedTags, t)
		}
		sort.Ints(os.KeyedTags)
		os.KeyedLayout = keyedLayout(os.KeyedTags, s.FormatType)
		switch os.KeyedLayout {
		case LayoutNativeRocksDB:
			os.Note = "keyed state is a RocksDB native snapshot (SST files): entries are not decoded"
		case LayoutMixed:
			os.Note = "keyed handles mix canonical and native layouts"
		}
		if os.Changelog != nil {
			os.Note = changelogNote(os.Note, os.Changelog)
		}
		s.Operators = append(s.Operators, os)
	}
	inferFormat(sp, s, false)
	return s
}

// summarizeChangelog adds changelog handle h of subtask st to c; add counts
// the bytes of each change-log stream and inline change.
func summarizeChangelog(c *ChangelogSummary, st int, h *ChangelogHandle, add func(*StreamHandle)) {
	c.Handles++
	c.CheckpointedBytes += h.CheckpointedSize
	listInlineChanges(c, h)
	for _, m := range h.Materialized {
		if m != nil {
			c.MaterializedHandles++
		}
	}
	i := sort.Search(len(c.MaterializationIDs), func(i int) bool { return c.MaterializationIDs[i] >= h.MaterializationID })
	if i == len(c.MaterializationIDs) || c.MaterializationIDs[i] != h.MaterializationID {
		c.MaterializationIDs = append(c.MaterializationIDs, 0)
		copy(c.MaterializationIDs[i+1:], c.MaterializationIDs[i:])
		c.MaterializationIDs[i] = h.MaterializationID
	}
	for _, l := range h.NonMaterialized {
		if l == nil {
			continue
		}
		c.ChangeLogs++
		if l.Tag == TagChangelogByteIncrement {
			c.InlineChanges += len(l.Changes)
			c.InlineBytes += l.Len()
			for _, ch := range l.Changes {
				add(&StreamHandle{Tag: TagByteStream, Data: ch.Data})
			}
			continue
		}
		for _, s := range l.Streams {
			if s.Handle == nil {
				continue
			}
			add(s.Handle)
			c.Files = append(c.Files, FileSummary{Subtask: st, Name: s.Handle.Describe(), Bytes: s.Handle.Len()})
			c.FileBytes += s.Handle.Len()
		}
	}
}

// inferFormat fills an unknown format type from the keyed handles (see
// Summary.FormatInferred). Tags 3/12 alone do not tell the layout (heap
// checkpoints and Flink 1.15 RocksDB full snapshots share them): they count
// only once a scan has probed their blocks (probed).
func inferFormat(sp *Savepoint, s *Summary, probed bool) {
	if sp.Props != nil || sp.PropsErr != nil || (s.FormatType != "UNKNOWN" && !s.FormatInferred) {
		return
	}
	native, canonical := false, false
	for _, os := range s.Operators {
		for _, t := range os.KeyedTags {
			switch t {
			case TagIncrementalKeyGroups, TagIncrementalKeyGroupsV2:
				native = true
			case TagSavepointKeyGroups:
				canonical = true
			case TagKeyGroups, TagKeyGroupsV2:
				if !probed {
					continue
				}
				switch os.KeyedLayout {
				case LayoutCanonical:
					canonical = true
				case LayoutNativeHeap:
					native = true
				}
			}
		}
	}
	s.FormatType, s.FormatInferred = "UNKNOWN", false
	switch {
	case native && !canonical:
		s.FormatType, s.FormatInferred = FormatNative, true
	case canonical && !native:
		s.FormatType, s.FormatInferred = FormatCanonical, true
	}
}

// keyedLayout classifies an operator's keyed handles.
func keyedLayout(tags []int, format string) string {
	if len(tags) == 0 {
		return ""
	}
	layouts := map[string]bool{}
	for _, t := range tags {
		switch t {
		case TagSavepointKeyGroups:
			layouts[LayoutCanonical] = true
		case TagKeyGroups, TagKeyGroupsV2:
			// Tag 12/3 carries the canonical layout only for RocksDB full
			// checkpoints of Flink 1.15; a NATIVE savepoint or any heap
			// checkpoint uses the heap layout. Without a savepoint format we
			// cannot tell from metadata; ScanKeyed probes the first block.
			if format == FormatCanonical {
				layouts[LayoutCanonical] = true
			} else {
				layouts[LayoutNativeHeap] = true
			}
		case TagIncrementalKeyGroups, TagIncrementalKeyGroupsV2:
			layouts[LayoutNativeRocksDB] = true
		}
	}
	if len(layouts) == 0 {
		for _, t := range tags {
			if t == TagChangelog || t == TagChangelogV2 {
				return LayoutChangelog
			}
		}
	}
	if len(layouts) > 1 {
		return LayoutMixed
	}
	for l := range layouts {
		return l
	}
	return ""
}
