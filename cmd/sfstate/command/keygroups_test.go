package command

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/keygroups"
)

func runKG(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(append([]string{"sfstate"}, args...), &out, &errOut)
	return out.String(), errOut.String(), code
}

// tableRows parses a whitespace-aligned table into rows of fields, skipping
// the title line and the header.
func tableRows(t *testing.T, out string) [][]string {
	t.Helper()
	var rows [][]string
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	for i, l := range lines {
		if i < 2 {
			continue
		}
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

func TestKeygroupsAssignTable(t *testing.T) {
	// Key groups of the Flink fixtures: Tuple1<Long> keys at maxP 4, and
	// Tuple1<Integer> keys 0..9 at maxP 128 on 4 subtasks.
	out, errOut, code := runKG(t, "keygroups", "assign", "--max-parallelism", "4", "--parallelism", "4", "--key-type", "tuple<bigint>", "0", "1", "2", "3")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := [][]string{{"0", "0", "2", "2"}, {"1", "1", "2", "2"}, {"2", "2", "3", "3"}, {"3", "3", "1", "1"}}
	if got := tableRows(t, out); !equalRows(got, want) {
		t.Fatalf("got %v\nwant %v\n%s", got, want, out)
	}

	args := []string{"keygroups", "assign", "-m", "128", "-p", "4", "-t", "int"}
	for k := range 10 {
		args = append(args, string(rune('0'+k)))
	}
	out, _, code = runKG(t, args...)
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	wantKG := []string{"94", "86", "127", "113", "7", "126", "18", "113", "15", "51"}
	for i, r := range tableRows(t, out) {
		if r[2] != wantKG[i] {
			t.Errorf("key %d: kg %s, want %s", i, r[2], wantKG[i])
		}
		// [0..31] [32..63] [64..95] [96..127]
		kg := atoi(t, r[2])
		if want := kg / 32; atoi(t, r[3]) != want {
			t.Errorf("key %d kg %d: subtask %s, want %d", i, kg, r[3], want)
		}
	}
}

func TestKeygroupsAssignSQLRowsJSON(t *testing.T) {
	out, errOut, code := runKG(t, "--json", "keygroups", "assign", "-m", "128", "-t", "row<string>", "pen", "apple", "b", "null", `"null"`)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		MaxParallelism int
		Parallelism    int
		Keys           []struct {
			Key      string
			Hash     int32
			KeyGroup int
			Subtask  int
			KeyBytes string
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if rep.MaxParallelism != 128 || rep.Parallelism != 1 || len(rep.Keys) != 5 {
		t.Fatalf("report %+v", rep)
	}
	// MANIFEST §2.4: "pen" → 3, "apple" → 32, "b" → 11, NULL → 99.
	for i, want := range []int{3, 32, 11, 99} {
		if rep.Keys[i].KeyGroup != want {
			t.Errorf("%s: kg %d, want %d", rep.Keys[i].Key, rep.Keys[i].KeyGroup, want)
		}
	}
	// A quoted "null" is the string, not NULL.
	if rep.Keys[4].KeyGroup == 99 && rep.Keys[4].Hash == rep.Keys[3].Hash {
		t.Errorf("quoted null hashed as NULL")
	}
	// Key bytes: prefix 03, i32 length 16, then the row with "pen" inline.
	if got, want := rep.Keys[0].KeyBytes, "03"+"00000010"+"0000000000000000"+"70656e0000000083"; got != want {
		t.Errorf("key bytes %s, want %s", got, want)
	}
	// Same answer as the library for a two-column key with a NULL.
	out, _, code = runKG(t, "--json", "keygroups", "assign", "-m", "256", "-p", "3", "-t", "row<bigint, varchar(10)>", `null,"a, b"`)
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	row, err := keygroups.BuildRow([]keygroups.FieldType{keygroups.TypeBigInt, keygroups.TypeString}, []any{nil, "a, b"})
	if err != nil {
		t.Fatal(err)
	}
	kg := keygroups.Assign(keygroups.Row(row), 256)
	if rep.Keys[0].KeyGroup != kg || rep.Keys[0].Subtask != keygroups.SubtaskForKeyGroup(256, 3, kg) {
		t.Errorf("got %+v, want kg %d", rep.Keys[0], kg)
	}
	if !strings.HasPrefix(rep.Keys[0].KeyBytes, "00") && !strings.HasPrefix(rep.Keys[0].KeyBytes, "01") {
		t.Errorf("maxP 256 needs a 2-byte prefix: %s", rep.Keys[0].KeyBytes)
	}
}

func TestKeygroupsAssignDefaultsAndJavaTypes(t *testing.T) {
	// No --max-parallelism: Flink's default for p=200 is 512.
	out, _, code := runKG(t, "--json", "keygroups", "assign", "-p", "200", "-t", "string", "key")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	var rep struct {
		MaxParallelism int
		Keys           []struct {
			Hash     int32
			KeyGroup int
			KeyBytes string
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.MaxParallelism != 512 {
		t.Fatalf("default max parallelism %d", rep.MaxParallelism)
	}
	// "key".hashCode() = 106079; StringValue bytes 04 6B 65 79.
	if rep.Keys[0].Hash != 106079 || !strings.HasSuffix(rep.Keys[0].KeyBytes, "046b6579") {
		t.Fatalf("string key %+v", rep.Keys[0])
	}
	for _, tc := range []struct{ typ, key, hash string }{
		{"boolean", "true", "1231"}, {"long", "-1", "0"}, {"short", "-3", "-3"}, {"byte", "5", "5"},
		{"double", "1", "1072693248"}, {"float", "1", "1065353216"}, {"tuple<int, string>", "1,a", "128"},
	} {
		// "--" lets keys start with '-'.
		out, errOut, code := runKG(t, "keygroups", "assign", "-m", "128", "-t", tc.typ, "--", tc.key)
		if code != ExitOK {
			t.Fatalf("%s: exit %d %s", tc.typ, code, errOut)
		}
		if r := tableRows(t, out); len(r) != 1 || r[0][1] != tc.hash {
			t.Errorf("%s %s: %v, want hash %s", tc.typ, tc.key, r, tc.hash)
		}
	}
}

func TestKeygroupsUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"keygroups", "assign", "-m", "128"},                                    // no keys
		{"keygroups", "assign", "-m", "128", "-p", "129", "1"},                  // p > maxP
		{"keygroups", "assign", "-m", "40000", "1"},                             // maxP too big
		{"keygroups", "assign", "-p", "0", "1"},                                 // p < 1
		{"keygroups", "assign", "-t", "uuid", "1"},                              // unknown type
		{"keygroups", "assign", "-t", "bigint", "x"},                            // bad value
		{"keygroups", "assign", "-t", "int", "3000000000"},                      // out of range
		{"keygroups", "assign", "-t", "row<int,string>", "1"},                   // too few fields
		{"keygroups", "assign", "-t", "row<int>", `"1`},                         // open quote
		{"keygroups", "assign", "-t", "row<decimal(5,1)>", "1.25"},              // scale
		{"keygroups", "assign", "-t", "row<foo>", "1"},                          // bad row type
		{"keygroups", "assign", "-t", "tuple<bigint>", "null"},                  // null tuple field
		{"keygroups", "assign", "-t", "tuple<row<int>>", "1"},                   // nested
		{"keygroups", "assign", "--no-such-flag", "1"},                          // flag
		{"keygroups", "plan", "-m", "128", "--from", "2"},                       // missing --to
		{"keygroups", "plan", "-m", "128", "--from", "0", "--to", "2"},          // bad from
		{"keygroups", "plan", "-m", "128", "--from", "2", "--to", "129"},        // to > maxP
		{"keygroups", "plan", "-m", "128", "--from", "2", "--to", "3", "extra"}, // stray arg
	} {
		_, errOut, code := runKG(t, args...)
		if code != ExitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, ExitUsage, errOut)
		}
		if errOut == "" {
			t.Errorf("%v: no error message", args)
		}
	}
}

func TestKeygroupsPlan(t *testing.T) {
	out, errOut, code := runKG(t, "keygroups", "plan", "--max-parallelism", "128", "--from", "2", "--to", "3")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"0            [0..42]     43     0:[0..42]",
		"1            [43..85]    43     0:[43..63] 1:[64..85]",
		"2            [86..127]   42     1:[86..127]",
		"0            [0..63]     0,1",
		"1            [64..127]   1,2",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}

	out, _, code = runKG(t, "--json", "keygroups", "plan", "-m", "1000", "--from", "7", "--to", "3")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	var rep struct {
		keygroups.RescalePlan
		Readers [][]int `json:"readers"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want, _ := keygroups.Plan(1000, 7, 3)
	if len(rep.Subtasks) != 3 || len(rep.Readers) != 7 || rep.MaxParallelism != 1000 {
		t.Fatalf("json plan %+v", rep)
	}
	for j, a := range rep.Subtasks {
		if a.Range != want.Subtasks[j].Range || len(a.Pieces) != len(want.Subtasks[j].Pieces) {
			t.Fatalf("subtask %d: %+v, want %+v", j, a, want.Subtasks[j])
		}
		for k := range a.Pieces {
			if a.Pieces[k] != want.Subtasks[j].Pieces[k] {
				t.Fatalf("subtask %d piece %d: %+v", j, k, a.Pieces[k])
			}
		}
	}

	out, _, code = runKG(t, "keygroups", "plan", "-m", "128", "--from", "4", "--to", "4")
	if code != ExitOK || !strings.Contains(out, "unchanged") {
		t.Fatalf("identity plan: exit %d\n%s", code, out)
	}
}

func equalRows(a, b [][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if strings.Join(a[i], " ") != strings.Join(b[i], " ") {
			return false
		}
	}
	return true
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("not a number: %q", s)
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func TestBenchKeygroupsQuickJSON(t *testing.T) {
	out, errOut, code := runKG(t, "--json", "bench", "keygroups", "--keys", "1000")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res []struct {
		Workload string
		Keys     int
		NsPerKey float64
		Checksum int
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(res) < 5 {
		t.Fatalf("%d workloads", len(res))
	}
	// The checksum is the sum of the key groups computed; recompute two.
	wantLong, wantRow := 0, 0
	for i := range 1000 {
		wantLong += keygroups.KeyGroupFor(keygroups.HashLong(int64(i)), 128)
		row, _ := keygroups.BuildRow([]keygroups.FieldType{keygroups.TypeBigInt}, []any{int64(i)})
		wantRow += keygroups.Assign(keygroups.Row(row), 128)
	}
	for _, r := range res {
		if r.Keys != 1000 || r.NsPerKey <= 0 {
			t.Errorf("result %+v", r)
		}
		switch r.Workload {
		case "java Long", "Tuple1<Long>":
			if r.Checksum != wantLong {
				t.Errorf("%s checksum %d, want %d", r.Workload, r.Checksum, wantLong)
			}
		case "SQL row<bigint> build+hash":
			if r.Checksum != wantRow {
				t.Errorf("%s checksum %d, want %d", r.Workload, r.Checksum, wantRow)
			}
		}
	}
	if _, _, code := runKG(t, "bench", "keygroups", "--keys", "-5"); code != ExitUsage {
		t.Errorf("negative --keys: exit %d", code)
	}
}

func runKGStdin(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	app := NewApp(&out, &errOut)
	app.Reader = strings.NewReader(stdin)
	err := app.Run(append([]string{"sfstate"}, args...))
	if err != nil {
		errOut.WriteString(err.Error())
	}
	return out.String(), errOut.String(), ExitCode(err)
}

func TestKeygroupsAssignStdin(t *testing.T) {
	out, errOut, code := runKGStdin(t, "pen\r\n\napple\nb\n", "keygroups", "assign", "-t", "row<string>", "-")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := [][]string{{"pen", "-135104997", "3", "0"}, {"apple", "660430696", "32", "0"}, {"b", "377813733", "11", "0"}}
	if got := tableRows(t, out); !equalRows(got, want) {
		t.Fatalf("got %v\n%s", got, out)
	}
	if _, _, code := runKGStdin(t, "\n\n", "keygroups", "assign", "-"); code != ExitUsage {
		t.Errorf("empty stdin: exit %d", code)
	}
	if _, _, code := runKGStdin(t, strings.Repeat("x", maxKeyLine+10), "keygroups", "assign", "-t", "string", "-"); code != ExitUsage {
		t.Errorf("overlong line: exit %d", code)
	}
	if _, _, code := runKGStdin(t, "1\nnope\n", "keygroups", "assign", "-t", "int", "-"); code != ExitUsage {
		t.Errorf("bad key on stdin: exit %d", code)
	}
}

func TestKeygroupsRanges(t *testing.T) {
	out, errOut, code := runKG(t, "keygroups", "ranges", "-m", "128", "-p", "4")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := [][]string{{"0", "[0..31]", "32"}, {"1", "[32..63]", "32"}, {"2", "[64..95]", "32"}, {"3", "[96..127]", "32"}}
	if got := tableRows(t, out); !equalRows(got, want) {
		t.Fatalf("got %v\n%s", got, out)
	}
	out, _, code = runKG(t, "--json", "keygroups", "ranges", "-p", "86")
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	var rep struct {
		MaxParallelism int
		PrefixBytes    int
		Subtasks       []keygroups.Range
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	// Flink's default for parallelism 86 is 256 → 2-byte prefix.
	if rep.MaxParallelism != 256 || rep.PrefixBytes != 2 || len(rep.Subtasks) != 86 || rep.Subtasks[85].End != 255 {
		t.Fatalf("report %+v", rep)
	}
	for _, args := range [][]string{
		{"keygroups", "ranges", "-m", "128"},
		{"keygroups", "ranges", "-m", "4", "-p", "5"},
		{"keygroups", "ranges", "-p", "2", "extra"},
	} {
		if _, _, code := runKG(t, args...); code != ExitUsage {
			t.Errorf("%v: exit %d", args, code)
		}
	}
}
