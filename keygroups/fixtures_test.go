package keygroups

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sfstate/sfstate/internal/fixtures"
)

// The reference decodings in _expected/ give every keyed entry of the real
// savepoints with its key group, key, and (for SQL) the logical types of the
// rows involved. These tests rebuild every SQL row they can with RowBuilder
// and require the exact bytes — RowDataSerializer's i32 length followed by
// the BinaryRowData, keys also preceded by their key-group byte — to occur
// in the binary _metadata, and the key's hash to give the recorded key
// group. The binary, not the JSON, is the oracle: a row built wrongly
// cannot be found.

type expectedMeta struct {
	Operators []struct {
		OperatorID     string `json:"operatorId"`
		MaxParallelism int    `json:"maxParallelism"`
		Subtasks       map[string]struct {
			KeyedMeta *struct {
				KeySerializer json.RawMessage `json:"keySerializer"`
				States        []struct {
					Name        string          `json:"name"`
					Serializers json.RawMessage `json:"serializers"`
				} `json:"states"`
			} `json:"keyedMeta"`
		} `json:"subtasks"`
	} `json:"operators"`
}

type logicalType struct {
	Type      string `json:"type"`
	Precision *int   `json:"precision"`
	Scale     *int   `json:"scale"`
}

// fieldTypeOf maps a Java LogicalType class name to a FieldType.
func fieldTypeOf(lt logicalType) (FieldType, bool) {
	prec := func(def int) int {
		if lt.Precision != nil {
			return *lt.Precision
		}
		return def
	}
	switch lt.Type {
	case "BooleanType":
		return TypeBoolean, true
	case "TinyIntType":
		return TypeTinyInt, true
	case "SmallIntType":
		return TypeSmallInt, true
	case "IntType":
		return TypeInt, true
	case "BigIntType":
		return TypeBigInt, true
	case "FloatType":
		return TypeFloat, true
	case "DoubleType":
		return TypeDouble, true
	case "VarCharType", "CharType":
		return TypeString, true
	case "VarBinaryType", "BinaryType":
		return TypeBytes, true
	case "DateType":
		return TypeDate, true
	case "TimeType":
		return TypeTime, true
	case "TimestampType":
		return TypeTimestamp(prec(6)), true
	case "LocalZonedTimestampType":
		return TypeTimestampLTZ(prec(6)), true
	case "DecimalType":
		s := 0
		if lt.Scale != nil {
			s = *lt.Scale
		}
		return TypeDecimal(prec(10), s), true
	}
	return FieldType{}, false
}

// rowTypeLists collects, depth first, the field types of every
// RowDataSerializer snapshot inside a serializer JSON tree; lists holding a
// type the builder does not model are dropped.
func rowTypeLists(raw json.RawMessage) [][]FieldType {
	var out [][]FieldType
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if lts, ok := x["logicalTypes"].([]any); ok {
				var types []FieldType
				okAll := true
				for _, l := range lts {
					b, _ := json.Marshal(l)
					var lt logicalType
					if json.Unmarshal(b, &lt) != nil {
						okAll = false
						break
					}
					ft, ok := fieldTypeOf(lt)
					if !ok {
						okAll = false
						break
					}
					types = append(types, ft)
				}
				if okAll {
					out = append(out, types)
				}
			}
			for _, k := range sortedKeys(x) {
				walk(x[k])
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	var v any
	if err := json.Unmarshal(raw, &v); err == nil {
		walk(v)
	}
	return out
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// Deterministic order; any order works because candidates are tried by arity.
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

var rowKinds = map[string]RowKind{"+I": Insert, "-U": UpdateBefore, "+U": UpdateAfter, "-D": Delete}

// asRow recognises the ["+I", [fields…]] form of a decoded row.
func asRow(v any) (RowKind, []any, bool) {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return 0, nil, false
	}
	k, ok := a[0].(string)
	if !ok {
		return 0, nil, false
	}
	kind, ok := rowKinds[k]
	if !ok {
		return 0, nil, false
	}
	fields, ok := a[1].([]any)
	return kind, fields, ok
}

// goValue converts a decoded JSON field to the Go value for t.
func goValue(t FieldType, v any) (any, bool) {
	if v == nil {
		return nil, true
	}
	switch t.Kind {
	case KindString:
		s, ok := v.(string)
		return s, ok
	case KindBoolean:
		b, ok := v.(bool)
		return b, ok
	case KindTinyInt, KindSmallInt, KindInt, KindBigInt, KindDate, KindTime:
		n, ok := v.(json.Number)
		if !ok {
			return nil, false
		}
		i, err := n.Int64()
		return i, err == nil
	case KindDouble, KindFloat:
		n, ok := v.(json.Number)
		if !ok {
			return nil, false
		}
		f, err := n.Float64()
		return f, err == nil
	case KindTimestamp, KindTimestampLTZ:
		a, ok := v.([]any)
		if !ok || len(a) != 2 || a[0] != "ts_millis" {
			return nil, false
		}
		n, ok := a[1].(json.Number)
		if !ok {
			return nil, false
		}
		ms, err := n.Int64()
		return Timestamp{Millis: ms}, err == nil
	}
	return nil, false
}

// buildFrom builds the decoded row with the first candidate type list that
// fits it.
func buildFrom(cands [][]FieldType, v any) ([]byte, []FieldType, bool) {
	kind, fields, ok := asRow(v)
	if !ok {
		return nil, nil, false
	}
next:
	for _, types := range cands {
		if len(types) != len(fields) {
			continue
		}
		vals := make([]any, len(fields))
		for i, f := range fields {
			gv, ok := goValue(types[i], f)
			if !ok {
				continue next
			}
			vals[i] = gv
		}
		b, err := NewRowBuilder(types)
		if err != nil {
			continue
		}
		b.Kind = kind
		row, err := b.Build(vals)
		if err != nil {
			continue
		}
		return row, types, true
	}
	return nil, nil, false
}

func be32(n int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }

func readJSONL(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		d := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func loadMeta(t *testing.T, dir, name string) expectedMeta {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "_expected", name+".metadata.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m expectedMeta
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s metadata.json: %v", name, err)
	}
	return m
}

func TestSQLRowsByteExactInFlinkSavepoints(t *testing.T) {
	dir := fixtures.Require(t)
	// SQL fixtures keep their _metadata under savepoint/ (next to plan/).
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var sqlDirs []string
	for _, e := range ents {
		if e.IsDir() && strings.HasPrefix(e.Name(), "sql-") {
			sqlDirs = append(sqlDirs, e.Name())
		}
	}
	if len(sqlDirs) == 0 {
		t.Fatal("no SQL fixtures found")
	}
	var keys, rows, longStrings, timestamps, nullKeys int
	for _, name := range sqlDirs {
		meta := loadMeta(t, dir, name)
		data, err := os.ReadFile(filepath.Join(dir, name, "savepoint", "_metadata"))
		if err != nil {
			t.Fatal(err)
		}
		type opInfo struct {
			maxP     int
			keyTypes []FieldType
			states   map[string][][]FieldType
		}
		ops := map[string]opInfo{}
		for _, op := range meta.Operators {
			for _, st := range op.Subtasks {
				if st.KeyedMeta == nil {
					continue
				}
				kl := rowTypeLists(st.KeyedMeta.KeySerializer)
				if len(kl) == 0 {
					t.Fatalf("%s op %s: key types not understood", name, op.OperatorID)
				}
				info := opInfo{maxP: op.MaxParallelism, keyTypes: kl[0], states: map[string][][]FieldType{}}
				for _, s := range st.KeyedMeta.States {
					info.states[s.Name] = rowTypeLists(s.Serializers)
				}
				ops[op.OperatorID] = info
			}
		}
		for _, e := range readJSONL(t, filepath.Join(dir, "_expected", name+".entries.jsonl")) {
			op, _ := e["op"].(string)
			info, ok := ops[op]
			if !ok {
				t.Fatalf("%s: entry of unknown operator %q", name, op)
			}
			kgNum, _ := e["kg"].(json.Number)
			kg64, err := kgNum.Int64()
			if err != nil {
				t.Fatalf("%s: bad kg %v", name, e["kg"])
			}
			kg := int(kg64)
			state, _ := e["state"].(string)

			keyJSON := e["key"]
			if tm, ok := e["timer"].([]any); ok && len(tm) == 2 {
				if body, ok := tm[1].(map[string]any); ok {
					keyJSON = body["key"]
				}
			}
			row, _, ok := buildFrom([][]FieldType{info.keyTypes}, keyJSON)
			if !ok {
				t.Fatalf("%s/%s: cannot build key %v with %v", name, state, keyJSON, info.keyTypes)
			}
			if got := Assign(Row(row), info.maxP); got != kg {
				t.Errorf("%s/%s key %v: kg %d, want %d", name, state, keyJSON, got, kg)
			}
			// The last entry of each state in a key-group block carries
			// the 0x80 "meta data follows" flag in its first key byte.
			needle := append(AppendPrefix(nil, kg, PrefixWidth(info.maxP)), be32(len(row))...)
			needle = append(needle, row...)
			flagged := append([]byte{needle[0] | 0x80}, needle[1:]...)
			if !bytes.Contains(data, needle) && !bytes.Contains(data, flagged) {
				t.Errorf("%s/%s key %v: bytes % x not in _metadata", name, state, keyJSON, needle)
			}
			keys++
			if _, f, _ := asRow(keyJSON); len(f) == 1 && f[0] == nil {
				nullKeys++
			}

			// Rows inside values and user keys.
			cands := info.states[state]
			var rowVals []any
			var prefixes [][]byte
			add := func(v any, prefix []byte) {
				if _, _, ok := asRow(v); ok {
					rowVals = append(rowVals, v)
					prefixes = append(prefixes, prefix)
				}
			}
			add(e["userKey"], nil)
			switch v := e["value"].(type) {
			case []any:
				if _, _, ok := asRow(v); ok {
					add(v, nil)
				} else if len(v) == 2 && v[0] == "TtlValue" {
					if body, ok := v[1].(map[string]any); ok {
						n, _ := body["lastAccess"].(json.Number)
						ts, err := n.Int64()
						if err == nil {
							add(body["value"], binary.BigEndian.AppendUint64(nil, uint64(ts)))
						}
					}
				} else {
					for _, el := range v {
						add(el, nil)
					}
				}
			}
			for i, rv := range rowVals {
				row, types, ok := buildFrom(cands, rv)
				if !ok {
					continue // e.g. StructuredType accumulators
				}
				needle := append(append(append([]byte(nil), prefixes[i]...), be32(len(row))...), row...)
				if !bytes.Contains(data, needle) {
					t.Errorf("%s/%s row %v as %v: bytes % x not in _metadata", name, state, rv, types, needle)
					continue
				}
				rows++
				_, fields, _ := asRow(rv)
				for j, f := range fields {
					if s, ok := f.(string); ok && len(s) > 7 {
						longStrings++
					}
					if types[j].Kind == KindTimestamp && f != nil {
						timestamps++
					}
				}
			}
		}
	}
	t.Logf("verified %d key rows (%d NULL keys) and %d value/user-key rows (%d long strings, %d timestamps)", keys, nullKeys, rows, longStrings, timestamps)
	// The fixtures hold these at least (MANIFEST §2.4); fewer means rows
	// were silently skipped.
	if keys < 60 || rows < 35 || longStrings < 1 || timestamps < 10 || nullKeys < 9 {
		t.Errorf("too little verified: keys=%d rows=%d longStrings=%d timestamps=%d nullKeys=%d", keys, rows, longStrings, timestamps, nullKeys)
	}
}

// DataStream savepoints keyed by Tuple1<Long> / Tuple1<Integer>: every
// recorded key's group must come out of Assign.
func TestTupleKeysOfDataStreamSavepoints(t *testing.T) {
	dir := fixtures.Require(t)
	checked := 0
	for _, name := range fixtures.Savepoints(t) {
		if strings.HasPrefix(name, "sql-") || strings.Contains(name, "NATIVE") {
			continue
		}
		path := filepath.Join(dir, "_expected", name+".entries.jsonl")
		if _, err := os.Stat(path); err != nil {
			continue
		}
		meta := loadMeta(t, dir, name)
		type opInfo struct {
			maxP  int
			field string // nested serializer of the Tuple1 key
		}
		ops := map[string]opInfo{}
		for _, op := range meta.Operators {
			for _, st := range op.Subtasks {
				if st.KeyedMeta == nil {
					continue
				}
				var ks struct {
					Outer  any `json:"outer"`
					Nested []struct {
						Class string `json:"class"`
					} `json:"nested"`
				}
				if json.Unmarshal(st.KeyedMeta.KeySerializer, &ks) != nil || ks.Outer != "org.apache.flink.api.java.tuple.Tuple1" || len(ks.Nested) != 1 {
					continue
				}
				ops[op.OperatorID] = opInfo{maxP: op.MaxParallelism, field: ks.Nested[0].Class}
			}
		}
		for _, e := range readJSONL(t, path) {
			info, ok := ops[e["op"].(string)]
			if !ok {
				continue
			}
			keyJSON := e["key"]
			if tm, ok := e["timer"].([]any); ok && len(tm) == 2 {
				if body, ok := tm[1].(map[string]any); ok {
					keyJSON = body["key"]
				}
			}
			k, ok := keyJSON.([]any)
			if !ok || len(k) != 1 {
				continue
			}
			n, ok := k[0].(json.Number)
			if !ok {
				continue
			}
			v, err := n.Int64()
			if err != nil {
				t.Fatal(err)
			}
			var key Key
			switch {
			case strings.Contains(info.field, "LongSerializer"):
				key = Tuple{Long(v)}
			case strings.Contains(info.field, "IntSerializer"):
				key = Tuple{Int(int32(v))}
			default:
				continue
			}
			want, _ := e["kg"].(json.Number).Int64()
			if got := Assign(key, info.maxP); got != int(want) {
				t.Errorf("%s: key %v (%s) at maxP %d: kg %d, want %d", name, v, info.field, info.maxP, got, want)
			}
			checked++
		}
	}
	t.Logf("checked %d DataStream entries", checked)
	if checked < 100 {
		t.Errorf("only %d DataStream entries checked", checked)
	}
}
