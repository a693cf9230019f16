package command

import (
	"bytes"
	"fmt"
	"html/template"
	"sort"
	"strings"
	"time"

	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/verify"
)

// The HTML report of `inspect --html` is one self-contained page (inline
// CSS and SVG, no script, no external resource) laid out for an on-call
// engineer: first what needs attention (notes, partial states, skew
// between subtasks, expired entries, native snapshots not decoded), then
// the size per operator, then one card per operator with its size per
// subtask, the entries per key group with the subtasks' key-group ranges
// marked, its keyed states (types, entries, TTL ages, expired counts) and
// operator states. Charts are HTML bars or SVG scaled to the page width
// (viewBox, no text inside SVG), so nothing overflows or clips at any
// width; tables turn into stacked rows on narrow screens.

const (
	// reportMaxBars is the most subtasks drawn as labelled bars; more are
	// drawn as one column chart.
	reportMaxBars = 64
	// reportKGColumns is the most columns of a key-group chart: larger
	// max parallelisms are binned.
	reportKGColumns = 256
	// reportSkewRatio: a subtask this many times the median size is
	// flagged (and listed under attention once it is at least
	// reportSkewMinBytes).
	reportSkewRatio    = 2.0
	reportSkewMinBytes = 1 << 20
)

// reportBar is one labelled horizontal bar.
type reportBar struct {
	Label string
	Sub   string // second label line (e.g. a key-group range)
	Width template.CSS
	Text  string
	Hot   bool
}

// reportBars scales values to bar widths (percent of the largest).
func reportBars(labels, subs, texts []string, vals []float64, hot []bool) []reportBar {
	maxV := 0.0
	for _, v := range vals {
		maxV = max(maxV, v)
	}
	out := make([]reportBar, len(vals))
	for i, v := range vals {
		pct := 0.0
		if maxV > 0 {
			pct = v / maxV * 100
		}
		out[i] = reportBar{Label: labels[i], Text: texts[i], Width: template.CSS(fmt.Sprintf("width:%.2f%%", pct))}
		if subs != nil {
			out[i].Sub = subs[i]
		}
		if hot != nil {
			out[i].Hot = hot[i]
		}
	}
	return out
}

// reportAlert is one line under "needs attention".
type reportAlert struct {
	Level  string // "warn" or "info"
	Anchor string // operator card, "" for the savepoint
	Where  string
	Text   string
}

// reportState is a keyed state row.
type reportState struct {
	S       *savepoint.StateSummary
	Types   string
	Expired string
	TTLAge  string
	Ages    []reportBar
}

// reportSubtasks is an operator's size per subtask.
type reportSubtasks struct {
	Bars    []reportBar   // one per subtask when there are few
	Columns template.HTML // SVG column chart when there are many
	Stats   string
	Skew    float64 // largest / median bytes (0 when unknown)
	Last    int     // index of the last subtask
	Largest []string
}

// reportKeyGroups is an operator's entries per key group.
type reportKeyGroups struct {
	SVG     template.HTML
	Bin     int
	Axis    []reportAxisLabel
	Last    int
	Stats   string
	Hottest string
	Split   bool // more than one subtask: ranges are marked
}

type reportAxisLabel struct {
	Flex  template.CSS
	Label string
	Title string
}

// reportOp is one operator card.
type reportOp struct {
	O            *savepoint.OperatorSummary
	Anchor       string
	Title        string
	Layout       string
	Decoded      bool
	Subtasks     *reportSubtasks
	KG           *reportKeyGroups
	States       []*reportState
	TTLNoFlag    bool
	Deep         string
	NativeFiles  string
	Changelog    string
	ChangelogErr string
}

type reportPage struct {
	S         *savepoint.Summary
	Format    string
	TTL       string
	Alerts    []reportAlert
	Sizes     []reportBar
	Ops       []*reportOp
	Stateless []*reportOp
	// Native lists the operators whose keyed state is a RocksDB native
	// snapshot (not decoded without --deep); Deep is the command to use.
	Native []*reportOp
	Deep   string
}

// reportName is an operator's display name: its name, else its uid, else
// the short id.
func reportName(op *savepoint.OperatorSummary) string {
	switch {
	case op.Name != "":
		return op.Name
	case op.UID != "":
		return op.UID
	case len(op.ID) >= 8:
		return "operator " + op.ID[:8]
	}
	return "operator " + op.ID
}

// reportLayout explains a keyed layout.
func reportLayout(l string) string {
	switch l {
	case savepoint.LayoutCanonical:
		return "canonical: Flink's unified savepoint layout (key-group blocks), decoded"
	case savepoint.LayoutNativeHeap:
		return "heap: the hashmap backend's own key-group layout (checkpoint or NATIVE savepoint), decoded"
	case savepoint.LayoutNativeRocksDB:
		return "RocksDB native snapshot: SST files, not decoded without --deep"
	case savepoint.LayoutMixed:
		return "mixed: canonical and native handles"
	case savepoint.LayoutChangelog:
		return "changelog: all keyed state is in the state-change log"
	}
	return l
}

// applyOperatorNames gives operators names from --names specs: ID=NAME
// (the 32-digit operator id) or UID=NAME (a uid, matched against the uid
// recorded in V5 metadata or hashed to its operator id as Flink does).
func applyOperatorNames(s *savepoint.Summary, specs []string) error {
	for _, spec := range specs {
		key, name, ok := strings.Cut(spec, "=")
		key, name = strings.TrimSpace(key), strings.TrimSpace(name)
		if !ok || key == "" || name == "" {
			return fmt.Errorf("--names %q: want ID=NAME or UID=NAME", spec)
		}
		hashed := savepoint.OperatorIDFromUID(key).String()
		found := false
		for _, op := range s.Operators {
			switch {
			case op.ID == strings.ToLower(key), op.UID != "" && op.UID == key:
			case op.ID == hashed:
				if op.UID == "" {
					op.UID = key
				}
			default:
				continue
			}
			op.Name, found = name, true
		}
		if !found {
			return fmt.Errorf("--names %q: no operator with id or uid %q in %s", spec, key, s.Source)
		}
	}
	return nil
}

// reportSubtaskChart builds an operator's size-per-subtask chart: bytes
// from the metadata, entries from the key-group counts when decoded.
func reportSubtaskChart(op *savepoint.OperatorSummary, decoded bool) *reportSubtasks {
	if len(op.SubtaskBytes) == 0 {
		return nil
	}
	n := op.Parallelism
	if last := op.SubtaskBytes[len(op.SubtaskBytes)-1].Subtask; n <= last {
		n = last + 1
	}
	n = min(n, keygroups.MaxParallelismLimit)
	bytesOf := make([]int64, n)
	for _, sb := range op.SubtaskBytes {
		if sb.Subtask >= 0 && sb.Subtask < n {
			bytesOf[sb.Subtask] = sb.Bytes
		}
	}
	var entries []int64
	ranges := []keygroups.Range(nil)
	if keygroups.CheckParallelism(op.MaxParallelism, op.Parallelism) == nil && op.Parallelism == n {
		ranges = keygroups.Ranges(op.MaxParallelism, op.Parallelism)
	}
	if decoded && op.KeyGroups != nil && ranges != nil {
		entries = make([]int64, n)
		for _, c := range op.KeyGroups.Counts {
			if c.KeyGroup >= 0 && c.KeyGroup < op.MaxParallelism {
				entries[keygroups.SubtaskForKeyGroup(op.MaxParallelism, op.Parallelism, c.KeyGroup)] += c.Entries
			}
		}
	}
	sorted := append([]int64(nil), bytesOf...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	median, largest := sorted[(n-1)/2], sorted[n-1]
	r := &reportSubtasks{Last: n - 1}
	if median > 0 {
		r.Skew = float64(largest) / float64(median)
	}
	r.Stats = fmt.Sprintf("%s; per subtask min %s, median %s, max %s", plural(n, "subtask"), inspectBytes(sorted[0]), inspectBytes(median), inspectBytes(largest))
	if n > 1 && median > 0 {
		r.Stats += fmt.Sprintf(" (largest %.1f× the median)", r.Skew)
	} else if n > 1 && largest > 0 {
		r.Stats += " (most subtasks hold nothing)"
	}
	hot := func(b int64) bool {
		return n > 1 && b > 0 && (median == 0 || float64(b) >= reportSkewRatio*float64(median))
	}
	if n == 1 {
		r.Stats = "1 subtask: " + inspectBytes(bytesOf[0])
		if entries != nil {
			r.Stats += ", " + plural(int(entries[0]), "entry")
		}
		if ranges != nil {
			r.Stats += ", key groups " + ranges[0].String()
		}
		return r
	}
	if n <= reportMaxBars {
		labels, subs, texts := make([]string, n), make([]string, n), make([]string, n)
		vals, hots := make([]float64, n), make([]bool, n)
		for i := range n {
			labels[i] = fmt.Sprintf("subtask %d", i)
			if ranges != nil {
				subs[i] = "key groups " + ranges[i].String()
			}
			texts[i] = inspectBytes(bytesOf[i])
			if entries != nil {
				texts[i] += " · " + plural(int(entries[i]), "entry")
			}
			vals[i], hots[i] = float64(bytesOf[i]), hot(bytesOf[i])
		}
		r.Bars = reportBars(labels, subs, texts, vals, hots)
		return r
	}
	// Many subtasks: one column per subtask, and the largest listed.
	var buf bytes.Buffer
	fmt.Fprintf(&buf, `<svg class="cols" viewBox="0 0 %d 100" preserveAspectRatio="none" role="img" aria-label="bytes per subtask">`, n)
	for i, b := range bytesOf {
		if b == 0 || largest == 0 {
			continue
		}
		h := float64(b) / float64(largest) * 100
		cls := "b"
		if hot(b) {
			cls = "b hot"
		}
		fmt.Fprintf(&buf, `<rect x="%d" y="%.2f" width="1" height="%.2f" class="%s"><title>subtask %d: %s</title></rect>`, i, 100-h, h, cls, i, inspectBytes(b))
	}
	buf.WriteString(`</svg>`)
	r.Columns = template.HTML(buf.String())
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return bytesOf[idx[a]] > bytesOf[idx[b]] })
	for _, i := range idx[:min(5, n)] {
		s := fmt.Sprintf("subtask %d: %s", i, inspectBytes(bytesOf[i]))
		if entries != nil {
			s += ", " + plural(int(entries[i]), "entry")
		}
		r.Largest = append(r.Largest, s)
	}
	return r
}

// reportKeyGroupChart draws entries per key group over the operator's max
// parallelism (binned to at most reportKGColumns columns), shading every
// other subtask's key-group range and marking the boundaries.
func reportKeyGroupChart(op *savepoint.OperatorSummary) *reportKeyGroups {
	d := op.KeyGroups
	maxP := op.MaxParallelism
	if d == nil || maxP <= 0 || maxP > keygroups.MaxParallelismLimit {
		return nil
	}
	bin := (maxP + reportKGColumns - 1) / reportKGColumns
	cols := (maxP + bin - 1) / bin
	sums := make([]int64, cols)
	for _, c := range d.Counts {
		if c.KeyGroup >= 0 && c.KeyGroup < maxP {
			sums[c.KeyGroup/bin] += c.Entries
		}
	}
	var top int64
	for _, v := range sums {
		top = max(top, v)
	}
	var ranges []keygroups.Range
	if keygroups.CheckParallelism(maxP, op.Parallelism) == nil {
		ranges = keygroups.Ranges(maxP, op.Parallelism)
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, `<svg class="kg" viewBox="0 0 %d 100" preserveAspectRatio="none" role="img" aria-label="entries per key group">`, maxP)
	for i, r := range ranges {
		if i%2 == 1 && !r.IsEmpty() {
			fmt.Fprintf(&buf, `<rect x="%d" y="0" width="%d" height="100" class="band"><title>subtask %d: key groups %s</title></rect>`, r.Start, r.Len(), i, r)
		}
	}
	for i, v := range sums {
		if v == 0 || top == 0 {
			continue
		}
		h := max(float64(v)/float64(top)*100, 1.5)
		lo, hi := i*bin, min(i*bin+bin, maxP)-1
		what := fmt.Sprintf("key group %d", lo)
		if hi > lo {
			what = fmt.Sprintf("key groups %d-%d", lo, hi)
		}
		fmt.Fprintf(&buf, `<rect x="%d" y="%.2f" width="%d" height="%.2f" class="b"><title>%s: %s</title></rect>`, lo, 100-h, hi-lo+1, h, what, plural(int(v), "entry"))
	}
	for i, r := range ranges {
		if i > 0 {
			fmt.Fprintf(&buf, `<line x1="%d" x2="%d" y1="0" y2="100" class="edge" vector-effect="non-scaling-stroke"/>`, r.Start, r.Start)
		}
	}
	buf.WriteString(`</svg>`)
	k := &reportKeyGroups{SVG: template.HTML(buf.String()), Bin: bin, Last: maxP - 1, Split: len(ranges) > 1}
	if len(ranges) > 1 && len(ranges) <= 16 {
		for i, r := range ranges {
			k.Axis = append(k.Axis, reportAxisLabel{Flex: template.CSS(fmt.Sprintf("flex:%d 1 0", r.Len())), Label: fmt.Sprint(i), Title: fmt.Sprintf("subtask %d: key groups %s", i, r)})
		}
	}
	k.Stats = fmt.Sprintf("%d of %d key groups non-empty; entries per key group min %d, median %d, max %d", d.NonEmpty, d.KeyGroups, d.Min, d.Median, d.Max)
	var hot []string
	for _, h := range d.Hottest {
		s := fmt.Sprintf("%d (%d", h.KeyGroup, h.Entries)
		if ranges != nil && h.KeyGroup >= 0 && h.KeyGroup < maxP {
			s += fmt.Sprintf(", subtask %d", keygroups.SubtaskForKeyGroup(maxP, op.Parallelism, h.KeyGroup))
		}
		hot = append(hot, s+")")
	}
	k.Hottest = strings.Join(hot, ", ")
	return k
}

// reportStateRow describes a keyed state.
func reportStateRow(s *savepoint.Summary, st *savepoint.StateSummary) *reportState {
	r := &reportState{S: st}
	t := "key " + st.KeyType
	if st.NamespaceType != "" {
		t += ", namespace " + st.NamespaceType
	}
	if st.UserKeyType != "" {
		t += ", user key " + st.UserKeyType
	}
	r.Types = t + ", value " + st.ValueType
	if st.TTLEntries > 0 && st.TTLOldest != nil && st.TTLNewest != nil {
		r.TTLAge = fmt.Sprintf("last access %s … %s", inspectMillis(*st.TTLOldest), inspectMillis(*st.TTLNewest))
		if s.TTLMillis > 0 {
			r.Expired = fmt.Sprintf("%d of %d", st.Expired, st.TTLEntries)
		}
		var labels, texts []string
		var vals []float64
		for _, b := range st.TTLAges {
			labels, texts, vals = append(labels, b.Label), append(texts, fmt.Sprint(b.Entries)), append(vals, float64(b.Entries))
		}
		r.Ages = reportBars(labels, nil, texts, vals, nil)
	}
	return r
}

// buildReport gathers everything the page shows.
func buildReport(s *savepoint.Summary) *reportPage {
	p := &reportPage{S: s, Format: s.FormatType}
	if s.FormatInferred {
		p.Format += " (inferred)"
	}
	if s.SnapshotName != "" {
		p.Format += " · " + s.SnapshotName
		if s.PostCheckpointAction != "" {
			p.Format += ", action " + s.PostCheckpointAction
		}
	}
	if s.TTLMillis > 0 {
		p.TTL = fmt.Sprintf("entries last accessed before %s count as expired (--ttl %s, reference time %s)",
			inspectMillis(s.NowMillis-s.TTLMillis), time.Duration(s.TTLMillis)*time.Millisecond, inspectMillis(s.NowMillis))
	}
	for _, n := range s.Notes {
		p.Alerts = append(p.Alerts, reportAlert{Level: "warn", Where: "savepoint", Text: n})
	}
	if !s.Scanned {
		p.Alerts = append(p.Alerts, reportAlert{Level: "info", Where: "savepoint", Text: "metadata only: state files were not read, so keyed states, entry counts and key groups are not shown"})
	}
	var labels, subs, texts []string
	var vals []float64
	var native []*reportOp
	for i, op := range s.Operators {
		r := &reportOp{O: op, Anchor: fmt.Sprintf("op%d", i), Title: reportName(op), Decoded: s.Scanned && inspectDecoded(op.KeyedLayout)}
		if op.Bytes == 0 && len(op.KeyedStates) == 0 && len(op.OperatorStates) == 0 {
			p.Stateless = append(p.Stateless, r)
			continue
		}
		p.Ops = append(p.Ops, r)
		labels, texts, vals = append(labels, r.Title), append(texts, inspectBytes(op.Bytes)), append(vals, float64(op.Bytes))
		subs = append(subs, op.ID)
		r.Layout = reportLayout(op.KeyedLayout)
		r.Subtasks = reportSubtaskChart(op, r.Decoded)
		if r.Decoded {
			r.KG = reportKeyGroupChart(op)
		}
		alert := func(level, text string) {
			p.Alerts = append(p.Alerts, reportAlert{Level: level, Anchor: r.Anchor, Where: r.Title, Text: text})
		}
		if st := r.Subtasks; st != nil && st.Skew >= reportSkewRatio && op.Bytes >= reportSkewMinBytes {
			alert("warn", fmt.Sprintf("subtask skew: the largest subtask holds %.1f× the median (%s)", st.Skew, st.Stats))
		}
		for _, st := range op.KeyedStates {
			row := reportStateRow(s, st)
			r.States = append(r.States, row)
			if st.Partial != "" {
				alert("warn", fmt.Sprintf("keyed state %s is partial: %s", st.Name, st.Partial))
			}
			if s.TTLMillis > 0 && st.Expired > 0 {
				alert("info", fmt.Sprintf("keyed state %s: %d of %d TTL entries expired", st.Name, st.Expired, st.TTLEntries))
			}
			if st.TTL && s.TTLMillis == 0 {
				r.TTLNoFlag = true
			}
		}
		for _, os := range op.OperatorStates {
			if os.Partial != "" {
				alert("warn", fmt.Sprintf("operator state %s is partial: %s", os.Name, os.Partial))
			}
		}
		switch op.KeyedLayout {
		case savepoint.LayoutNativeRocksDB, savepoint.LayoutMixed:
			r.Deep = "sfstate inspect --deep " + s.Source
			native = append(native, r)
		}
		if n := len(op.NativeFiles); n > 0 {
			var total, largest int64
			shared := 0
			for _, f := range op.NativeFiles {
				total += f.Bytes
				largest = max(largest, f.Bytes)
				if f.Shared {
					shared++
				}
			}
			r.NativeFiles = fmt.Sprintf("%s (%d shared), %s, largest %s", plural(n, "native file"), shared, inspectBytes(total), inspectBytes(largest))
		}
		if c := op.Changelog; c != nil {
			r.Changelog = c.String()
			if c.Undecoded > 0 {
				r.ChangelogErr = fmt.Sprintf("%d changes not decoded (first: %s)", c.Undecoded, c.Problem)
				alert("warn", "changelog: "+r.ChangelogErr)
			}
		}
		if op.Note != "" && op.Changelog == nil && op.KeyedLayout != savepoint.LayoutNativeRocksDB {
			alert("info", op.Note)
		}
	}
	if len(native) > 0 {
		p.Native = native
		p.Deep = native[0].Deep
	}
	p.Sizes = reportBars(labels, subs, texts, vals, nil)
	return p
}

var reportTmpl = template.Must(template.New("r").Funcs(template.FuncMap{
	"bytes": inspectBytes,
	"yesno": inspectYesNo,
	"plural": func(n int, noun string) string {
		return plural(n, noun)
	},
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sfstate inspect: {{.S.Source}}</title>
<style>
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;margin:0;padding:16px;color:#1d2330;background:#f3f5f8;overflow-wrap:anywhere}
main{max-width:1240px;margin:0 auto}
h1{font-size:1.45em;margin:0 0 .4em}h2{font-size:1.2em;margin:0 0 .5em}h3{font-size:1em;margin:1.1em 0 .4em}
.card{background:#fff;border:1px solid #dce1e9;border-radius:8px;padding:16px;margin:0 0 16px;min-width:0}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;font-size:.88em}
.muted{color:#5b6475}
dl.kv{display:grid;grid-template-columns:max-content minmax(0,1fr);gap:3px 14px;margin:0}
dl.kv dt{color:#5b6475}dl.kv dd{margin:0;min-width:0}
ul.alerts{list-style:none;margin:0;padding:0}
ul.alerts li{padding:6px 10px;margin:0 0 6px;border-left:4px solid #8aa4cf;background:#f1f5fb;border-radius:4px}
ul.alerts li.warn{border-color:#d9822b;background:#fdf4ea}
ul.alerts a{color:inherit;font-weight:600}
.ok{color:#2a7a3b}
.bars{display:grid;gap:6px}
.bar{display:grid;grid-template-columns:minmax(0,17em) minmax(48px,1fr) minmax(0,12em);gap:2px 12px;align-items:center}
.bar .lab{min-width:0}.bar .sub{display:block;color:#5b6475;font-size:.85em}
.bar .val{min-width:0;font-variant-numeric:tabular-nums}
.track{height:12px;background:#e9edf3;border-radius:3px;min-width:0}
.fill{height:100%;background:#4a7bd0;border-radius:3px;min-width:2px}
.bar.hot .fill{background:#d9622b}
svg.kg,svg.cols{display:block;width:100%;height:130px;background:#fafbfd;border:1px solid #e3e7ee}
svg .b{fill:#4a7bd0}svg .b.hot{fill:#d9622b}svg .band{fill:#e8edf5}svg .edge{stroke:#8a93a6;stroke-width:1;stroke-dasharray:3 2}
.axis{display:flex;justify-content:space-between;gap:8px;font-size:.85em;color:#5b6475}
.subaxis{display:flex;font-size:.8em;color:#5b6475;margin-top:2px}
.subaxis span{min-width:0;text-align:center;border-left:1px dashed #8a93a6}.subaxis span:first-child{border-left:0}
table{border-collapse:collapse;width:100%;margin:.3em 0 .8em}
th,td{border-bottom:1px solid #e3e7ee;padding:5px 8px;text-align:left;vertical-align:top;min-width:0}
th{background:#f3f5f8;font-weight:600}
th,td.n,td.k{white-space:nowrap;overflow-wrap:normal}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
tr.partial td{background:#fdf4ea;border-bottom:1px solid #e3e7ee}
.tag{display:inline-block;padding:0 6px;border-radius:9px;background:#e9edf3;font-size:.82em}
.tag.warn{background:#fbe3cc}
details summary{cursor:pointer;color:#2c4f8f}
.opgrid{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,440px),1fr));gap:0 24px}
.bars.sub .bar{grid-template-columns:minmax(0,9em) minmax(48px,1fr) minmax(0,10em)}
@media (max-width:640px){
 body{padding:8px;font-size:14px}.card{padding:12px}
 dl.kv{grid-template-columns:minmax(0,1fr)}dl.kv dt{margin-top:4px}
 .bar,.bars.sub .bar{grid-template-columns:minmax(0,1fr) minmax(0,auto)}.bar .lab{grid-column:1/-1}
 table.rt thead{display:none}
 table.rt,table.rt tbody,table.rt tr{display:block;width:100%}
 table.rt tr{border:1px solid #e3e7ee;border-radius:6px;margin:0 0 8px;padding:4px 0}
 table.rt td{display:grid;grid-template-columns:7.5em minmax(0,1fr);gap:8px;border:0;text-align:left}
 table.rt td::before{content:attr(data-l);color:#5b6475}
 table.rt td.n{text-align:left}
 table.rt td,table.rt td.n,table.rt td.k{white-space:normal;overflow-wrap:anywhere}
}
</style></head><body><main>
<section class="card" id="summary">
<h1>Savepoint report</h1>
<dl class="kv">
<dt>source</dt><dd class="mono">{{.S.Source}}</dd>
{{with .S.Picked}}<dt>picked</dt><dd>{{.}}</dd>{{end}}
<dt>metadata</dt><dd>version {{.S.MetadataVersion}}, checkpoint {{.S.CheckpointID}}, {{bytes .S.MetadataBytes}}</dd>
<dt>format</dt><dd>{{.Format}}</dd>
<dt>state</dt><dd>{{bytes .S.TotalBytes}} in {{plural .S.Files "file"}} + {{bytes .S.InlineBytes}} inline; {{plural (len .S.Operators) "operator"}}, {{len .Ops}} with state</dd>
{{if .TTL}}<dt>TTL</dt><dd>{{.TTL}}</dd>{{end}}
{{range .S.Sources}}<dt>files from</dt><dd class="mono">{{.}}</dd>{{end}}
</dl>
</section>
<section class="card" id="attention">
<h2>Needs attention</h2>
{{if or .Alerts .Native}}<ul class="alerts">{{if .Native}}<li class="info"><b>RocksDB native snapshot</b>: the keyed state of {{range $i, $o := .Native}}{{if $i}}, {{end}}<a href="#{{$o.Anchor}}">{{$o.Title}}</a>{{end}} is kept as RocksDB SST files, whose entries are not decoded here; <code>{{.Deep}}</code> decodes them.</li>
{{end}}{{range .Alerts}}<li class="{{.Level}}">{{if .Anchor}}<a href="#{{.Anchor}}">{{.Where}}</a>{{else}}<b>{{.Where}}</b>{{end}}: {{.Text}}</li>
{{end}}</ul>{{else}}<p class="ok">Nothing stands out: no notes, no partial states, no skew between subtasks.</p>{{end}}
</section>
<section class="card" id="sizes">
<h2>State size per operator</h2>
{{if .Sizes}}<div class="bars">{{range $i, $b := .Sizes}}{{$op := index $.Ops $i}}<div class="bar"><span class="lab"><a href="#{{$op.Anchor}}">{{$b.Label}}</a><span class="sub mono">{{$b.Sub}}</span></span><div class="track"><div class="fill" style="{{$b.Width}}"></div></div><span class="val">{{$b.Text}}</span></div>
{{end}}</div>{{else}}<p class="muted">No operator holds state.</p>{{end}}
{{if .Stateless}}<p class="muted">Without state: {{range $i, $o := .Stateless}}{{if $i}}, {{end}}{{$o.Title}} <span class="mono">{{$o.O.ID}}</span>{{end}}.</p>{{end}}
</section>
{{range .Ops}}{{$op := .}}
<section class="card op" id="{{.Anchor}}">
<h2>{{.Title}}</h2>
<dl class="kv">
<dt>id</dt><dd class="mono">{{.O.ID}}</dd>
{{if .O.UID}}<dt>uid</dt><dd class="mono">{{.O.UID}}</dd>{{end}}
{{if .O.Name}}<dt>name</dt><dd>{{.O.Name}}</dd>{{end}}
<dt>parallelism</dt><dd>{{.O.Parallelism}} (max parallelism {{.O.MaxParallelism}}), {{plural .O.SubtasksWithState "subtask"}} with state{{if .O.FinishedSubtasks}}, {{.O.FinishedSubtasks}} finished{{end}}{{if .O.FullyFinished}}, operator finished{{end}}</dd>
<dt>size</dt><dd>{{bytes .O.Bytes}}: keyed {{bytes .O.KeyedBytes}}, operator state {{bytes .O.OperatorBytes}}</dd>
{{if .O.KeyedLayout}}<dt>keyed layout</dt><dd>{{.Layout}} <span class="muted">(handle tags {{.O.KeyedTags}})</span></dd>{{end}}
{{if .NativeFiles}}<dt>native files</dt><dd>{{.NativeFiles}}</dd>{{end}}
{{if .O.Note}}<dt>note</dt><dd>{{.O.Note}}</dd>{{end}}
</dl>
{{if .Deep}}<p><span class="tag warn">not decoded</span> Keyed entries of a RocksDB native snapshot are read with <code>{{.Deep}}</code>.</p>{{end}}
<div class="opgrid">
{{with .Subtasks}}<div>
<h3>Size per subtask</h3>
<p class="muted">{{.Stats}}</p>
{{if .Bars}}<div class="bars sub">{{range .Bars}}<div class="bar{{if .Hot}} hot{{end}}"><span class="lab">{{.Label}}{{if .Sub}}<span class="sub">{{.Sub}}</span>{{end}}</span><div class="track"><div class="fill" style="{{.Width}}"></div></div><span class="val">{{.Text}}</span></div>
{{end}}</div>{{else if .Columns}}{{.Columns}}<div class="axis"><span>subtask 0</span><span>subtask {{.Last}}</span></div>
<p>Largest: {{range $i, $l := .Largest}}{{if $i}}; {{end}}{{$l}}{{end}}</p>{{end}}
</div>{{end}}
{{with .KG}}<div>
<h3>Entries per key group</h3>
<p class="muted">{{.Stats}}{{if gt .Bin 1}}; each column sums {{.Bin}} key groups{{end}}.{{if .Split}} Shaded bands and dashed lines mark the subtasks' key-group ranges.{{end}}</p>
{{.SVG}}
{{if .Axis}}<div class="subaxis">{{range .Axis}}<span style="{{.Flex}}" title="{{.Title}}">{{.Label}}</span>{{end}}</div>{{end}}
<div class="axis"><span>key group 0</span>{{if .Axis}}<span>subtask numbers above</span>{{end}}<span>key group {{.Last}}</span></div>
{{if .Hottest}}<p>Hottest key groups: {{.Hottest}}</p>{{end}}
</div>{{end}}
</div>
{{if .States}}<h3>Keyed states</h3>
<table class="rt"><thead><tr><th>state</th><th>kind</th><th>types</th><th>TTL</th><th class="n">entries</th><th class="n">bytes</th>{{if $.TTL}}<th class="n">expired</th>{{end}}</tr></thead><tbody>
{{range .States}}<tr><td data-l="state"><b>{{.S.Name}}</b></td><td data-l="kind" class="k">{{.S.Kind}}</td><td data-l="types"><span class="mono">{{.Types}}</span></td><td data-l="TTL">{{yesno .S.TTL}}{{if .TTLAge}}<br><span class="muted">{{.TTLAge}}</span>{{end}}</td><td data-l="entries" class="n">{{if $op.Decoded}}{{.S.Entries}}{{else}}—{{end}}</td><td data-l="bytes" class="n">{{if $op.Decoded}}{{bytes .S.Bytes}}{{else}}—{{end}}</td>{{if $.TTL}}<td data-l="expired" class="n">{{if .Expired}}{{.Expired}}{{else}}—{{end}}</td>{{end}}</tr>
{{if .S.Partial}}<tr class="partial"><td data-l="partial" colspan="7"><span><span class="tag warn">partial</span> {{.S.Partial}}</span></td></tr>{{end}}
{{end}}</tbody></table>
{{if .TTLNoFlag}}<p class="muted">Pass <code>--ttl DURATION</code> to count the entries whose TTL has expired.</p>{{end}}
{{range .States}}{{if .Ages}}<h3>TTL age of {{.S.Name}} (time since last access)</h3>
<div class="bars">{{range .Ages}}<div class="bar"><span class="lab">{{.Label}}</span><div class="track"><div class="fill" style="{{.Width}}"></div></div><span class="val">{{.Text}}</span></div>
{{end}}</div>{{end}}{{end}}
{{end}}
{{if .O.OperatorStates}}<h3>Operator states</h3>
<table class="rt"><thead><tr><th>operator state</th><th>mode</th><th>type</th><th class="n">elements</th><th class="n">subtasks</th></tr></thead><tbody>
{{range .O.OperatorStates}}<tr><td data-l="state"><b>{{.Name}}</b></td><td data-l="mode" class="k">{{.Mode}}</td><td data-l="type"><span class="mono">{{.Type}}</span></td><td data-l="elements" class="n">{{.Elements}}</td><td data-l="subtasks" class="n">{{.Subtasks}}</td></tr>
{{if .Partial}}<tr class="partial"><td data-l="partial" colspan="5"><span><span class="tag warn">partial</span> {{.Partial}}</span></td></tr>{{end}}
{{end}}</tbody></table>{{end}}
{{if .Changelog}}<h3>Changelog</h3><p>{{.Changelog}}</p>{{end}}
{{if .O.NativeFiles}}<details><summary>{{.NativeFiles}}</summary>
<table class="rt"><thead><tr><th class="n">subtask</th><th>file</th><th class="n">bytes</th><th>shared</th></tr></thead><tbody>
{{range .O.NativeFiles}}<tr><td data-l="subtask" class="n">{{.Subtask}}</td><td data-l="file"><span class="mono">{{.Name}}</span></td><td data-l="bytes" class="n">{{bytes .Bytes}}</td><td data-l="shared">{{yesno .Shared}}</td></tr>
{{end}}</tbody></table></details>{{end}}
</section>
{{end}}
<p class="muted">Written by sfstate inspect --html.</p>
</main></body></html>
`))

// renderHTMLReport renders the report page.
func renderHTMLReport(s *savepoint.Summary) ([]byte, error) {
	var buf bytes.Buffer
	err := reportTmpl.Execute(&buf, buildReport(s))
	return buf.Bytes(), err
}

// writeHTMLReport writes the report atomically: a temporary file in the
// destination directory, fsynced, then renamed over path.
func writeHTMLReport(path string, s *savepoint.Summary) error {
	b, err := renderHTMLReport(s)
	if err == nil {
		err = verify.WriteFileAtomic(path, b)
	}
	if err != nil {
		return fmt.Errorf("writing HTML report %s: %w", path, err)
	}
	return nil
}
