package command

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sfstate/sfstate/internal/fixtures"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/savepoint"
)

// htmlLayoutCheck is the script of the test page, which holds every report
// in an iframe (srcdoc, so same-origin) of the width under test. Once all
// have loaded it opens every <details>, measures each report and writes a
// JSON array of verdicts into <pre id="layout-check">: the viewport width,
// the visible text and every layout problem found — the body or a card
// scrolling sideways, an element reaching outside the viewport or wider
// than its parent, a box whose content is wider than the box (clipped or
// overflowing text).
const htmlLayoutCheck = `<pre id="layout-check"></pre><script>
addEventListener('load', () => {
  const verdicts = [...document.querySelectorAll('iframe')].map(f => {
    const doc = f.contentDocument, win = f.contentWindow;
    doc.querySelectorAll('details').forEach(d => d.open = true);
    const vw = doc.documentElement.clientWidth;
    const bad = [];
    const name = e => {
      let s = e.tagName.toLowerCase();
      if (e.id) s += '#' + e.id;
      if (typeof e.className === 'string' && e.className) s += '.' + e.className.trim().split(/\s+/).join('.');
      return s + ' "' + (e.textContent || '').trim().replace(/\s+/g, ' ').slice(0, 50) + '"';
    };
    for (const e of [doc.body, ...doc.querySelectorAll('.card')]) {
      if (e.scrollWidth > e.clientWidth) bad.push('scrolls sideways: ' + name(e) + ' ' + e.scrollWidth + ' > ' + e.clientWidth);
    }
    for (const e of doc.querySelectorAll('main *')) {
      if (e.closest('svg') && e.tagName.toLowerCase() !== 'svg') continue;
      const r = e.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;
      if (r.left < -0.5 || r.right > vw + 0.5) bad.push('outside the viewport: ' + name(e) + ' [' + r.left.toFixed(1) + ', ' + r.right.toFixed(1) + '] of ' + vw);
      const cs = win.getComputedStyle(e);
      if (cs.display !== 'inline' && e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1) bad.push('content wider than its box: ' + name(e) + ' ' + e.scrollWidth + ' > ' + e.clientWidth);
      if (cs.textOverflow === 'ellipsis') bad.push('ellipsis: ' + name(e));
      const p = e.parentElement;
      if (p && cs.display !== 'inline' && cs.position !== 'absolute') {
        const pr = p.getBoundingClientRect();
        if (r.left < pr.left - 0.5 || r.right > pr.right + 0.5) bad.push('wider than its container: ' + name(e) + ' [' + r.left.toFixed(1) + ', ' + r.right.toFixed(1) + '] in [' + pr.left.toFixed(1) + ', ' + pr.right.toFixed(1) + ']');
      }
    }
    return {width: vw,
      subtaskBars: [...doc.querySelectorAll('section.op')].map(s => s.querySelectorAll('.bars.sub .bar').length),
      kgCharts: doc.querySelectorAll('svg.kg').length, edges: doc.querySelectorAll('svg.kg line.edge').length,
      problems: bad.slice(0, 40), nProblems: bad.length, text: doc.querySelector('main').innerText};
  });
  document.getElementById('layout-check').textContent = JSON.stringify(verdicts);
});
</script>`

type htmlVerdict struct {
	Width       int      `json:"width"`
	SubtaskBars []int    `json:"subtaskBars"`
	KGCharts    int      `json:"kgCharts"`
	Edges       int      `json:"edges"`
	Problems    []string `json:"problems"`
	NProblems   int      `json:"nProblems"`
	Text        string   `json:"text"`
}

// htmlChromium finds a Chromium binary: missing fails under CI=true and
// skips otherwise.
func htmlChromium(t *testing.T) string {
	t.Helper()
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium not found (make setup installs it); required when CI=true")
	}
	t.Skip("chromium not found; install it (make setup) to run the report layout test")
	return ""
}

var htmlLayoutPre = regexp.MustCompile(`(?s)<pre id="layout-check"[^>]*>(.*?)</pre>`)

// htmlRender loads the reports in one headless Chromium page, each in an
// iframe of its width, and returns the verdicts of htmlLayoutCheck in order.
func htmlRender(t *testing.T, chrome, dir string, reports [][]byte, widths []int) []htmlVerdict {
	t.Helper()
	var page strings.Builder
	page.WriteString("<!DOCTYPE html><html><head><meta charset=\"utf-8\"></head><body style=\"margin:0\">")
	for i, r := range reports {
		fmt.Fprintf(&page, `<iframe style="display:block;border:0;width:%dpx;height:900px" srcdoc="%s"></iframe>`, widths[i], html.EscapeString(string(r)))
	}
	page.WriteString(htmlLayoutCheck + "</body></html>")
	path := filepath.Join(dir, "layout-check.html")
	if err := os.WriteFile(path, []byte(page.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--hide-scrollbars", "--no-first-run", "--disable-extensions", "--user-data-dir="+filepath.Join(dir, "profile"),
		"--window-size=1400,900", "--virtual-time-budget=5000", "--dump-dom", "file://"+path)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	m := htmlLayoutPre.FindSubmatch(out)
	if m == nil || len(m[1]) == 0 {
		t.Fatalf("chromium: no layout verdict in the page (%d bytes of DOM)", len(out))
	}
	var v []htmlVerdict
	if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &v); err != nil {
		t.Fatalf("layout verdict: %v", err)
	}
	if len(v) != len(reports) {
		t.Fatalf("%d verdicts for %d reports", len(v), len(reports))
	}
	return v
}

// htmlSummary is the part of `--json inspect` the content checks use.
type htmlSummary struct {
	Scanned   bool `json:"scanned"`
	Operators []struct {
		ID                string `json:"id"`
		UID               string `json:"uid"`
		Name              string `json:"name"`
		Parallelism       int    `json:"parallelism"`
		SubtasksWithState int    `json:"subtasksWithState"`
		Bytes             int64  `json:"bytes"`
		KeyedLayout       string `json:"keyedLayout"`
		KeyGroups         *struct {
			NonEmpty int `json:"nonEmpty"`
		} `json:"keyGroups"`
		KeyedStates []struct {
			Name      string `json:"name"`
			ValueType string `json:"valueType"`
			Partial   string `json:"partial"`
		} `json:"keyedStates"`
		OperatorStates []struct {
			Name    string `json:"name"`
			Partial string `json:"partial"`
		} `json:"operatorStates"`
	} `json:"operators"`
}

// TestHTMLReportLayoutInChromium renders the report of several fixtures in
// headless Chromium at a desktop (1280 px) and a phone (390 px) width:
// nothing may overflow or clip, and every operator and state must be on
// the page.
func TestHTMLReportLayoutInChromium(t *testing.T) {
	chrome := htmlChromium(t)
	cases := []struct {
		name string
		path string // a fixture, or "" for htmlSyntheticSummary
		args []string
		want []string // further text the page must show
	}{
		{"synthetic-maxp32768", "", nil, []string{"each column sums 128 key groups", "subtask skew", "key group 32767", "Largest: subtask 37: 64.0 MiB"}},
		{"sql-join", fixtureSavepoint(t, "sql-rocksdb-canonical-join-mapstate"),
			[]string{"--names", "7c2e2faa042538c9c6536014ee065870=Join[7] (left-records ⋈ right-records)"},
			[]string{"Join[7] (left-records ⋈ right-records)", "user key ROW<INT, BIGINT, STRING>", "Hottest key groups: 94 (6, subtask 0)"}},
		{"heap-native", fixtureSavepoint(t, "flink1.20-hashmap-NATIVE-for-contrast"), nil,
			[]string{"heap: the hashmap backend's own key-group layout"}},
		{"rocksdb-native", fixtureSavepoint(t, "flink1.20-rocksdb-NATIVE-incremental-for-contrast"), nil,
			[]string{"RocksDB native snapshot", "sfstate inspect --deep"}},
		{"maxp128-p4", fixtureSavepoint(t, "flink1.20-hashmap-canonical-liststate-window-inline"), nil,
			[]string{"key groups [96..127]", "key group 127"}},
		{"partial", fixtures.MorePath(t, "flink1.16-rocksdb-canonical-user-serializer", "savepoint"), nil,
			[]string{"is partial", "TestSerializerSnapshot"}},
		{"ttl", fixtureSavepoint(t, "sql-rocksdb-canonical-groupagg-ttl-valuestate"), []string{"--ttl", "1h", "--now", "1706683200000"},
			[]string{"count as expired (--ttl 1h0m0s", "TTL age of"}},
	}
	dir := t.TempDir()
	widths := []int{1280, 390}
	var reports [][]byte
	var ws []int
	sums := make([]htmlSummary, len(cases))
	for i, tc := range cases {
		var b []byte
		if tc.path == "" {
			sum := htmlSyntheticSummary()
			var err error
			if b, err = renderHTMLReport(sum); err != nil {
				t.Fatal(err)
			}
			j, _ := json.Marshal(sum)
			if err := json.Unmarshal(j, &sums[i]); err != nil {
				t.Fatal(err)
			}
		} else {
			report := filepath.Join(dir, tc.name+".html")
			args := append([]string{"--json", "inspect", "--html", report}, tc.args...)
			stdout, errOut, code := run(t, append(args, tc.path)...)
			if code != ExitOK {
				t.Fatalf("%s: exit %d: %s", tc.name, code, errOut)
			}
			if err := json.Unmarshal([]byte(stdout), &sums[i]); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			var err error
			if b, err = os.ReadFile(report); err != nil {
				t.Fatal(err)
			}
		}
		if strings.Contains(string(b), "<script") || strings.Contains(string(b), "<link") || strings.Contains(string(b), "url(") {
			t.Fatalf("%s: the report is not self-contained", tc.name)
		}
		for _, w := range widths {
			reports, ws = append(reports, b), append(ws, w)
		}
	}
	verdicts := htmlRender(t, chrome, dir, reports, ws)
	for i, v := range verdicts {
		tc, width := cases[i/len(widths)], ws[i]
		t.Run(fmt.Sprintf("%s/%d", tc.name, width), func(t *testing.T) {
			if v.Width < width-20 || v.Width > width {
				t.Fatalf("viewport %d px, want about %d", v.Width, width)
			}
			for _, p := range v.Problems {
				t.Errorf("layout: %s", p)
			}
			if v.NProblems > len(v.Problems) {
				t.Errorf("... %d layout problems in all", v.NProblems)
			}
			htmlCheckContent(t, &sums[i/len(widths)], v, tc.want)
		})
	}
}

// htmlCheckContent checks that the rendered page shows every operator
// (id, and uid or name when known), every keyed and operator state and the
// expected phrases, and that the charts match the operators.
func htmlCheckContent(t *testing.T, sum *htmlSummary, v htmlVerdict, want []string) {
	t.Helper()
	text := v.Text
	for _, op := range sum.Operators {
		for _, s := range []string{op.ID, op.UID, op.Name} {
			if s != "" && !strings.Contains(text, s) {
				t.Errorf("operator %s: %q not on the page", op.ID, s)
			}
		}
		for _, st := range op.KeyedStates {
			if !strings.Contains(text, st.Name) || !strings.Contains(text, st.ValueType) {
				t.Errorf("operator %s: keyed state %s (%s) not on the page", op.ID, st.Name, st.ValueType)
			}
			if st.Partial != "" && !strings.Contains(text, st.Partial) {
				t.Errorf("state %s: partial reason not on the page", st.Name)
			}
		}
		for _, st := range op.OperatorStates {
			if !strings.Contains(text, st.Name) {
				t.Errorf("operator %s: operator state %s not on the page", op.ID, st.Name)
			}
		}
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("page lacks %q", w)
		}
	}
	// One subtask bar per subtask of every operator with state and
	// parallelism 2..64; a key-group chart per decoded operator with the
	// boundaries between its subtasks.
	var bars []int
	charts, edges := 0, 0
	for _, op := range sum.Operators {
		if op.Bytes == 0 && len(op.KeyedStates) == 0 && len(op.OperatorStates) == 0 {
			continue
		}
		n := 0
		if op.SubtasksWithState > 0 && op.Parallelism > 1 && op.Parallelism <= reportMaxBars {
			n = op.Parallelism
		}
		bars = append(bars, n)
		if sum.Scanned && inspectDecoded(op.KeyedLayout) && op.KeyGroups != nil {
			charts++
			edges += op.Parallelism - 1
		}
	}
	if fmt.Sprint(bars) != fmt.Sprint(v.SubtaskBars) {
		t.Errorf("subtask bars per operator %v, want %v", v.SubtaskBars, bars)
	}
	if v.KGCharts != charts || v.Edges != edges {
		t.Errorf("%d key-group charts with %d subtask boundaries, want %d with %d", v.KGCharts, v.Edges, charts, edges)
	}
}

// htmlSyntheticSummary is a summary no fixture has: max parallelism 32768,
// an operator of 100 subtasks (a column chart) with one subtask 64 times
// the others, one of 7 subtasks (bars), long unbreakable names and types.
func htmlSyntheticSummary() *savepoint.Summary {
	const maxP = 32768
	s := &savepoint.Summary{Source: "/data/savepoints/savepoint-4f2a9c-0123456789abcdef0123456789abcdef/_metadata", MetadataVersion: 5,
		CheckpointID: 7, FormatType: savepoint.FormatCanonical, Scanned: true, Notes: []string{"a note about the savepoint as a whole"}}
	for n, p := range []int{100, 7} {
		op := &savepoint.OperatorSummary{ID: savepoint.OperatorIDFromUID(fmt.Sprint("uid-", n)).String(), UID: fmt.Sprint("uid-", n),
			Name:        fmt.Sprintf("KeyedProcess_%d_with_a_really_long_operator_name_that_does_not_break_anywhere_at_all", n),
			Parallelism: p, MaxParallelism: maxP, SubtasksWithState: p, KeyedLayout: savepoint.LayoutCanonical, KeyedTags: []int{7}}
		counts := map[int]int64{}
		for i := range p {
			b := int64(1 << 20)
			if i == 37 {
				b = 64 << 20
			}
			op.SubtaskBytes = append(op.SubtaskBytes, savepoint.SubtaskBytes{Subtask: i, Bytes: b})
			op.Bytes += b
			r := keygroups.RangeForSubtask(maxP, p, i)
			for kg := r.Start; kg <= r.End; kg += 97 {
				counts[kg] += int64(1 + i%5)
			}
		}
		op.KeyedBytes = op.Bytes
		op.KeyGroups = savepoint.NewKeyGroupDist(counts, maxP)
		op.KeyedStates = []*savepoint.StateSummary{{Name: "a-state-name-that-goes-on-and-on-without-any-place-to-break-the-line", Kind: "MAP",
			KeyType: "ROW<BIGINT NOT NULL, STRING, TIMESTAMP(3), DECIMAL(38, 18), ARRAY<ROW<INT, STRING>>>", NamespaceType: "VOID_NAMESPACE",
			UserKeyType: "ROW<INT,BIGINT,STRING,STRING,STRING,STRING,STRING,STRING,STRING,STRING,STRING,STRING>", ValueType: "ROW<INT>",
			Entries: 12345, Bytes: 67890, Partial: "VALUE_SERIALIZER com.example.some.very.long.package.name.that.never.ends.CustomSerializerSnapshot is not known"}}
		s.Operators = append(s.Operators, op)
	}
	return s
}

func TestHTMLKeyGroupChartBinsAndBoundaries(t *testing.T) {
	s := htmlSyntheticSummary()
	for _, op := range s.Operators {
		k := reportKeyGroupChart(op)
		if k.Bin != 128 || k.Last != 32767 {
			t.Fatalf("bin %d last %d, want 128 and 32767", k.Bin, k.Last)
		}
		svg := string(k.SVG)
		if n := strings.Count(svg, `class="edge"`); n != op.Parallelism-1 {
			t.Errorf("p %d: %d boundaries", op.Parallelism, n)
		}
		// Every boundary sits at the first key group of a subtask.
		for i := 1; i < op.Parallelism; i++ {
			x := keygroups.RangeForSubtask(32768, op.Parallelism, i).Start
			if !strings.Contains(svg, fmt.Sprintf(`<line x1="%d" x2="%d"`, x, x)) {
				t.Errorf("p %d: no boundary at key group %d", op.Parallelism, x)
			}
		}
		// Columns sum their 128 key groups.
		var want int64
		for _, c := range op.KeyGroups.Counts {
			if c.KeyGroup < 128 {
				want += c.Entries
			}
		}
		if !strings.Contains(svg, fmt.Sprintf("<title>key groups 0-127: %s</title>", plural(int(want), "entry"))) {
			t.Errorf("p %d: first column is not the sum %d of key groups 0-127", op.Parallelism, want)
		}
		if n := strings.Count(svg, `class="b"`); n > reportKGColumns {
			t.Errorf("%d columns", n)
		}
	}
	// A small max parallelism is drawn one column per key group.
	op := &savepoint.OperatorSummary{Parallelism: 3, MaxParallelism: 10, KeyGroups: savepoint.NewKeyGroupDist(map[int]int64{9: 4}, 10)}
	if k := reportKeyGroupChart(op); k.Bin != 1 || !strings.Contains(string(k.SVG), "<title>key group 9: 4 entries</title>") || len(k.Axis) != 3 {
		t.Errorf("max parallelism 10: bin %d, axis %d, svg %s", k.Bin, len(k.Axis), k.SVG)
	}
}

func TestHTMLSubtaskChartFlagsSkew(t *testing.T) {
	s := htmlSyntheticSummary()
	big := reportSubtaskChart(s.Operators[0], true) // 100 subtasks: columns
	if big.Columns == "" || big.Bars != nil || big.Skew != 64 || !strings.HasPrefix(big.Largest[0], "subtask 37: 64.0 MiB") {
		t.Errorf("100 subtasks: skew %v, largest %v", big.Skew, big.Largest)
	}
	small := reportSubtaskChart(s.Operators[1], true) // 7 subtasks: bars
	if len(small.Bars) != 7 {
		t.Fatalf("%d bars", len(small.Bars))
	}
	for i, b := range small.Bars {
		if b.Hot != (i == 37) {
			t.Errorf("bar %d hot %v", i, b.Hot)
		}
		r := keygroups.RangeForSubtask(32768, 7, i)
		if b.Sub != "key groups "+r.String() {
			t.Errorf("bar %d: %q", i, b.Sub)
		}
		var entries int64
		for _, c := range s.Operators[1].KeyGroups.Counts {
			if r.Contains(c.KeyGroup) {
				entries += c.Entries
			}
		}
		if !strings.HasSuffix(b.Text, " · "+plural(int(entries), "entry")) {
			t.Errorf("bar %d: %q, want %d entries", i, b.Text, entries)
		}
	}
	p := buildReport(s)
	skews := 0
	for _, a := range p.Alerts {
		if strings.Contains(a.Text, "subtask skew") {
			skews++
		}
	}
	if skews != 1 {
		t.Errorf("%d skew alerts, want 1 (only the 100-subtask operator has subtask 37)", skews)
	}
}

func TestHTMLOperatorNames(t *testing.T) {
	s := &savepoint.Summary{Source: "x", Operators: []*savepoint.OperatorSummary{
		{ID: savepoint.OperatorIDFromUID("source-uid").String()},
		{ID: "0123456789abcdef0123456789abcdef"},
		{ID: savepoint.OperatorIDFromUID("other").String(), UID: "v5-uid"},
	}}
	if err := applyOperatorNames(s, []string{"source-uid=Kafka source", "0123456789ABCDEF0123456789ABCDEF=Join", "v5-uid = Sink"}); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%s/%s %s/%s %s/%s", s.Operators[0].UID, s.Operators[0].Name, s.Operators[1].UID, s.Operators[1].Name, s.Operators[2].UID, s.Operators[2].Name)
	if got != "source-uid/Kafka source /Join v5-uid/Sink" {
		t.Errorf("names: %s", got)
	}
	for _, bad := range []string{"nope=X", "=X", "source-uid=", "novalue"} {
		if err := applyOperatorNames(s, []string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestHTMLReportErrorNamesPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing-dir", "report.html")
	_, errOut, code := run(t, "inspect", "--html", path, fixtureSavepoint(t, "sql-rocksdb-canonical-join-mapstate"))
	if code != ExitIO || !strings.Contains(errOut, path) {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}
