package command

import (
	"bytes"
	"fmt"
	"html/template"
	"sort"

	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/verify"
)

// reportBar is one bar of an SVG bar chart.
type reportBar struct {
	Label string
	Value float64
	Text  string
}

type reportChart struct {
	Title  string
	Bars   []reportBar
	Width  int
	Height int
}

// svgChart renders a horizontal bar chart as inline SVG.
func svgChart(c reportChart) template.HTML {
	const rowH, labelW, textW = 18, 260, 110
	if c.Width == 0 {
		c.Width = 900
	}
	if len(c.Bars) == 0 {
		return template.HTML("<p class=\"empty\">no data</p>")
	}
	maxV := 0.0
	for _, b := range c.Bars {
		maxV = max(maxV, b.Value)
	}
	h := rowH*len(c.Bars) + 4
	var buf bytes.Buffer
	fmt.Fprintf(&buf, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" role="img" aria-label="%s">`, c.Width, h, template.HTMLEscapeString(c.Title))
	barW := float64(c.Width - labelW - textW)
	for i, b := range c.Bars {
		y := i*rowH + 2
		w := 0.0
		if maxV > 0 {
			w = b.Value / maxV * barW
		}
		fmt.Fprintf(&buf, `<text x="%d" y="%d" text-anchor="end" class="l">%s</text>`, labelW-6, y+13, template.HTMLEscapeString(b.Label))
		fmt.Fprintf(&buf, `<rect x="%d" y="%d" width="%.1f" height="%d" class="b"><title>%s: %s</title></rect>`, labelW, y+2, w, rowH-5, template.HTMLEscapeString(b.Label), template.HTMLEscapeString(b.Text))
		fmt.Fprintf(&buf, `<text x="%.1f" y="%d" class="v">%s</text>`, float64(labelW)+w+4, y+13, template.HTMLEscapeString(b.Text))
	}
	buf.WriteString(`</svg>`)
	return template.HTML(buf.String())
}

func reportShortID(op *savepoint.OperatorSummary) string {
	if op.UID != "" {
		return op.UID
	}
	if op.Name != "" {
		return op.Name
	}
	return op.ID[:8]
}

// reportCharts builds the charts of the HTML report.
func reportCharts(s *savepoint.Summary) []reportChart {
	var out []reportChart
	var sizes []reportBar
	for _, op := range s.Operators {
		if op.Bytes == 0 {
			continue
		}
		sizes = append(sizes, reportBar{reportShortID(op), float64(op.Bytes), inspectBytes(op.Bytes)})
	}
	out = append(out, reportChart{Title: "State size per operator", Bars: sizes})
	var states []reportBar
	for _, op := range s.Operators {
		for _, st := range op.KeyedStates {
			states = append(states, reportBar{reportShortID(op) + " / " + st.Name, float64(st.Bytes), fmt.Sprintf("%s, %d entries", inspectBytes(st.Bytes), st.Entries)})
		}
	}
	if s.Scanned {
		out = append(out, reportChart{Title: "Keyed state size per state", Bars: states})
	}
	for _, op := range s.Operators {
		if op.KeyGroups == nil || op.KeyGroups.NonEmpty == 0 {
			continue
		}
		var kgs []reportBar
		counts := op.KeyGroups.Counts
		// Bucket key groups so a chart never has more than 64 bars.
		bucket := 1
		for op.MaxParallelism/bucket > 64 {
			bucket *= 2
		}
		agg := map[int]int64{}
		for _, c := range counts {
			agg[c.KeyGroup/bucket] += c.Entries
		}
		keys := make([]int, 0, len(agg))
		for k := range agg {
			keys = append(keys, k)
		}
		sort.Ints(keys)
		for _, k := range keys {
			label := fmt.Sprintf("kg %d", k*bucket)
			if bucket > 1 {
				label = fmt.Sprintf("kg %d-%d", k*bucket, k*bucket+bucket-1)
			}
			kgs = append(kgs, reportBar{label, float64(agg[k]), fmt.Sprint(agg[k])})
		}
		out = append(out, reportChart{Title: "Entries per key group: " + reportShortID(op), Bars: kgs})
	}
	// TTL age histogram over all states.
	var ages []savepoint.AgeBucket
	for _, op := range s.Operators {
		for _, st := range op.KeyedStates {
			if ages == nil && len(st.TTLAges) > 0 {
				ages = make([]savepoint.AgeBucket, len(st.TTLAges))
				copy(ages, st.TTLAges)
				for i := range ages {
					ages[i].Entries = 0
				}
			}
			for i, b := range st.TTLAges {
				ages[i].Entries += b.Entries
			}
		}
	}
	if ages != nil {
		var bars []reportBar
		for _, b := range ages {
			bars = append(bars, reportBar{b.Label, float64(b.Entries), fmt.Sprint(b.Entries)})
		}
		out = append(out, reportChart{Title: "TTL age (time since last access)", Bars: bars})
	}
	return out
}

var reportTmpl = template.Must(template.New("r").Funcs(template.FuncMap{
	"bytes": inspectBytes,
	"svg":   svgChart,
	"yesno": inspectYesNo,
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>sfstate inspect: {{.S.Source}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}
th{background:#f3f3f3}.n{text-align:right}svg .b{fill:#4a7bd0}svg .l,svg .v{font:12px sans-serif;fill:#333}
.note{color:#a33}
</style></head><body>
<h1>Savepoint report</h1>
<table>
<tr><th>source</th><td>{{.S.Source}}</td></tr>
<tr><th>metadata</th><td>version {{.S.MetadataVersion}}, checkpoint {{.S.CheckpointID}}, {{bytes .S.MetadataBytes}}</td></tr>
<tr><th>format</th><td>{{.S.FormatType}}{{if .S.SnapshotName}} ({{.S.SnapshotName}}, {{.S.PostCheckpointAction}}){{end}}</td></tr>
<tr><th>state</th><td>{{bytes .S.TotalBytes}} in {{.S.Files}} files + {{bytes .S.InlineBytes}} inline</td></tr>
</table>
{{range .S.Notes}}<p class="note">{{.}}</p>{{end}}
{{range .Charts}}<h2>{{.Title}}</h2>{{svg .}}{{end}}
<h2>Operators</h2>
{{range .S.Operators}}
<h3>{{.ID}}{{if .UID}} uid {{.UID}}{{end}}{{if .Name}} ({{.Name}}){{end}}</h3>
<p>parallelism {{.Parallelism}}, max parallelism {{.MaxParallelism}}, {{.SubtasksWithState}} subtasks with state, {{bytes .Bytes}}{{if .KeyedLayout}}; keyed layout {{.KeyedLayout}}{{end}}</p>
{{if .Note}}<p class="note">{{.Note}}</p>{{end}}
{{if .KeyedStates}}<table><tr><th>state</th><th>kind</th><th>key</th><th>namespace</th><th>value</th><th>TTL</th><th>entries</th><th>bytes</th></tr>
{{range .KeyedStates}}<tr><td>{{.Name}}</td><td>{{.Kind}}</td><td>{{.KeyType}}</td><td>{{.NamespaceType}}</td><td>{{if .UserKeyType}}{{.UserKeyType}} → {{end}}{{.ValueType}}</td><td>{{yesno .TTL}}</td><td class="n">{{.Entries}}</td><td class="n">{{bytes .Bytes}}</td></tr>
{{end}}</table>{{end}}
{{if .OperatorStates}}<table><tr><th>operator state</th><th>mode</th><th>type</th><th>elements</th><th>subtasks</th></tr>
{{range .OperatorStates}}<tr><td>{{.Name}}</td><td>{{.Mode}}</td><td>{{.Type}}</td><td class="n">{{.Elements}}</td><td class="n">{{.Subtasks}}</td></tr>
{{end}}</table>{{end}}
{{if .NativeFiles}}<table><tr><th>subtask</th><th>native file</th><th>bytes</th></tr>
{{range .NativeFiles}}<tr><td>{{.Subtask}}</td><td>{{.Name}}</td><td class="n">{{.Bytes}}</td></tr>
{{end}}</table>{{end}}
{{end}}
</body></html>
`))

// renderHTMLReport renders the report page.
func renderHTMLReport(s *savepoint.Summary) ([]byte, error) {
	var buf bytes.Buffer
	err := reportTmpl.Execute(&buf, struct {
		S      *savepoint.Summary
		Charts []reportChart
	}{s, reportCharts(s)})
	return buf.Bytes(), err
}

// writeHTMLReport writes the report atomically: a temporary file in the
// destination directory, fsynced, then renamed over path.
func writeHTMLReport(path string, s *savepoint.Summary) error {
	b, err := renderHTMLReport(s)
	if err != nil {
		return err
	}
	return verify.WriteFileAtomic(path, b)
}
