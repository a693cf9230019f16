package verify

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sfstate/sfstate/savepoint/digest"
)

// WriteJSON writes the report with every digest.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// ReadReport reads a report (or shard digest file) written by WriteJSON.
func ReadReport(rd io.Reader, name string) (*Report, error) {
	var r Report
	dec := json.NewDecoder(io.LimitReader(rd, 4<<30))
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("verify: %s: %w", name, err)
	}
	return &r, nil
}

// WriteTable writes the human summary: one row per operator and state with
// the source's totals and one column per target (ok or the number of
// differing key groups), then every failure with its samples.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	hdr := []string{"OPERATOR", "STATE", "KIND", "ENTRIES", "COUNTS", "ASSOC", "TTL MIN", "TTL MAX"}
	if r.TTL != nil {
		hdr = append(hdr, "EXPIRED")
	}
	for i, t := range r.Targets {
		h := strings.ToUpper(t.Name)
		if t.Backend == "" {
			h = fmt.Sprintf("OTHER#%d", i+1)
			if len(r.Targets) == 1 {
				h = "OTHER"
			}
		}
		hdr = append(hdr, h)
	}
	fmt.Fprintln(tw, strings.Join(hdr, "\t"))
	for _, os := range r.states() {
		var tot digest.Group
		if r.Digest != nil {
			tot = r.Digest.Total(os[0], os[1])
		}
		row := []string{shortID(os[0]), os[1], r.stateKind(os[0], os[1]), fmt.Sprint(tot.Entries), fmt.Sprint(tot.Counts), fmt.Sprint(tot.Associations), "-", "-"}
		if tot.TTLEntries > 0 {
			row[6], row[7] = rfc3339Millis(tot.TTLMin), rfc3339Millis(tot.TTLMax)
		}
		if r.TTL != nil {
			row = append(row, fmt.Sprint(tot.Expired))
		}
		for _, t := range r.Targets {
			row = append(row, t.status(os[0], os[1]))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, nt := range r.Notes {
		fmt.Fprintf(w, "NOTE %s\n", nt)
	}
	for _, t := range r.Targets {
		if t.Skipped != "" {
			fmt.Fprintf(w, "NOTE %s: not restored: %s\n", t.Name, t.Skipped)
		}
		if !t.Unsupported {
			// (Skipped already lists them.)
			for _, x := range t.SkippedStates {
				fmt.Fprintf(w, "NOTE %s: not restored, left out of the comparison on both sides: %s\n", t.Name, x)
			}
		}
		for _, id := range sortedKeys(t.RestoredParallelism) {
			fmt.Fprintf(w, "NOTE %s: operator %s restored at parallelism %d (its max parallelism)\n", t.Name, id, t.RestoredParallelism[id])
		}
	}
	for _, f := range r.Failures() {
		fmt.Fprintln(w, "FAIL "+f)
	}
	for _, t := range r.Targets {
		for _, d := range t.Differences {
			if len(d.Samples) == 0 {
				continue
			}
			fmt.Fprintf(w, "%s, %s:\n", t.Name, d.GroupKey)
			label := "restored:"
			if t.Backend == "" {
				label = "other:   "
			}
			for _, s := range d.Samples {
				fmt.Fprintf(w, "  source:   %s\n  %s %s\n", orNone(s.Source), label, orNone(s.Target))
			}
		}
	}
	verdict := "OK: every target equals the source"
	if r.Unsupported {
		verdict = "NOT VERIFIED: the keyed state cannot be restored (see the notes)"
	}
	if !r.OK {
		verdict = fmt.Sprintf("FAILED: %d failures", len(r.Failures()))
	}
	if r.Shard != "" {
		verdict = "shard " + r.Shard + " " + verdict
	}
	_, err := fmt.Fprintln(w, verdict)
	return err
}

// rfc3339Millis formats a TTL timestamp (epoch milliseconds) for people, as
// inspect does; the JSON report keeps the epoch milliseconds.
func rfc3339Millis(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

func orNone(s string) string {
	if s == "" {
		return "(missing)"
	}
	return s
}

func (t *TargetResult) status(op, st string) string {
	if _, failed := t.OperatorErrors[op]; failed || t.Error != "" {
		return "ERROR"
	}
	n := 0
	for _, d := range t.Differences {
		if d.Operator == op && d.State == st {
			n++
		}
	}
	s := "ok"
	if t.SkippedStates.skips(GroupKey{Operator: op, State: st}) {
		s = "skipped"
	}
	if n > 0 {
		s = fmt.Sprintf("FAIL(%d kg)", n)
	}
	if p, ok := t.RestoredParallelism[op]; ok {
		s += fmt.Sprintf(" (p%d)", p)
	}
	return s
}

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr,omitempty"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Errors   int         `xml:"errors,attr"`
	Skipped  int         `xml:"skipped,attr,omitempty"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Error     *junitMessage `xml:"error,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Body    string `xml:",chardata"`
}

// JUnit renders the report as JUnit XML: a suite per target with one test
// case per operator and state, plus a "structure" suite for the check.
func (r *Report) JUnit() ([]byte, error) {
	all := junitSuites{Name: "sfstate verify " + r.Source}
	st := junitSuite{Name: "structure"}
	c := junitCase{Name: "check", Classname: "verify.structure"}
	var lines []string
	if r.Check != nil {
		for _, p := range r.Check.Problems {
			lines = append(lines, p.String())
		}
	}
	if r.SourceError != "" {
		lines = append(lines, r.SourceError)
	}
	if len(lines) > 0 {
		c.Failure = &junitMessage{Message: fmt.Sprintf("%d structural problems", len(lines)), Type: "structure", Body: joinLines(lines)}
		st.Failures++
	}
	st.Cases, st.Tests = []junitCase{c}, 1
	all.Suites = append(all.Suites, st)
	for _, t := range r.Targets {
		s := junitSuite{Name: t.Name}
		covered := make([]bool, len(t.SkippedStates))
		for _, os := range r.states() {
			c := junitCase{Name: shortID(os[0]) + "/" + os[1], Classname: "verify." + t.Name}
			var ls []string
			for _, d := range t.Differences {
				if d.Operator == os[0] && d.State == os[1] {
					ls = append(ls, d.String())
					for _, sm := range d.Samples {
						ls = append(ls, "  source:   "+orNone(sm.Source), "  restored: "+orNone(sm.Target))
					}
				}
			}
			switch {
			case t.Error != "":
				c.Error = &junitMessage{Message: t.Error, Type: "restore"}
				s.Errors++
			case t.OperatorErrors[os[0]] != "":
				c.Error = &junitMessage{Message: t.OperatorErrors[os[0]], Type: "restore"}
				s.Errors++
			case len(ls) > 0:
				c.Failure = &junitMessage{Message: fmt.Sprintf("operator %s state %q differs", os[0], os[1]), Type: "difference", Body: joinLines(ls)}
				s.Failures++
			default:
				for i, x := range t.SkippedStates {
					if x.Operator == os[0] && (x.State == "" || x.State == os[1]) {
						covered[i] = true
						if c.Skipped == nil {
							c.Skipped = &junitMessage{Message: x.Reason, Type: "not restored"}
							s.Skipped++
						}
					}
				}
			}
			if r.Digest != nil {
				tot := r.Digest.Total(os[0], os[1])
				c.SystemOut = fmt.Sprintf("operator %s state %s: %d entries, counts %d, associations %d, %d TTL timestamps, %d expired", os[0], os[1], tot.Entries, tot.Counts, tot.Associations, tot.TTLEntries, tot.Expired)
			}
			if p, ok := t.RestoredParallelism[os[0]]; ok {
				c.SystemOut = appendLine(c.SystemOut, fmt.Sprintf("restored at parallelism %d (its max parallelism)", p))
			}
			s.Cases = append(s.Cases, c)
			s.Tests++
		}
		// Skipped state the source digest lists no row for (an operator
		// whose state is only in a change log).
		for i, x := range t.SkippedStates {
			if covered[i] {
				continue
			}
			name := x.State
			if name == "" {
				name = "*"
			}
			s.Cases = append(s.Cases, junitCase{Name: shortID(x.Operator) + "/" + name, Classname: "verify." + t.Name,
				Skipped: &junitMessage{Message: x.Reason, Type: "not restored"}, SystemOut: x.String()})
			s.Tests++
			s.Skipped++
		}
		all.Suites = append(all.Suites, s)
	}
	for _, s := range all.Suites {
		all.Tests += s.Tests
		all.Failures += s.Failures
		all.Errors += s.Errors
		all.Skipped += s.Skipped
	}
	b, err := xml.MarshalIndent(all, "", "  ")
	if err != nil {
		return nil, err
	}
	return append([]byte(xml.Header), append(b, '\n')...), nil
}

// WriteFileAtomic writes b to path through a temporary file in the same
// directory, synced and renamed, so readers never see a partial file.
func WriteFileAtomic(path string, b []byte) error {
	if err := writeFileAtomic(path, b); err != nil {
		// Name the file asked for, not the temporary one beside it.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return &fs.PathError{Op: "write", Path: path, Err: pe.Err}
		}
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func writeFileAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(b); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	return nil
}
