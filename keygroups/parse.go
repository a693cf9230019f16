package keygroups

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// ParseFieldType parses a SQL type name as written in Flink SQL DDL
// (case-insensitive): BOOLEAN, TINYINT, SMALLINT, INT/INTEGER, BIGINT,
// FLOAT/REAL, DOUBLE, STRING/VARCHAR[(n)]/CHAR[(n)], BYTES/VARBINARY[(n)]/
// BINARY[(n)], DATE, TIME[(p)], TIMESTAMP[(p)], TIMESTAMP_LTZ[(p)] (also
// "TIMESTAMP[(p)] WITH LOCAL TIME ZONE"), DECIMAL/NUMERIC/DEC[(p[, s])],
// INTERVAL YEAR TO MONTH (months) and INTERVAL DAY TO SECOND[(p)]
// (milliseconds; also the other day-time interval spellings).
// Defaults follow Flink: TIMESTAMP precision 6, DECIMAL(10, 0).
func ParseFieldType(s string) (FieldType, error) {
	norm := strings.Join(strings.Fields(strings.ToLower(s)), " ")
	name, args := norm, ""
	ltz := false
	if rest, ok := strings.CutSuffix(name, " with local time zone"); ok {
		name, ltz = rest, true
	}
	if i := strings.IndexByte(name, '('); i >= 0 {
		if !strings.HasSuffix(name, ")") {
			return FieldType{}, fmt.Errorf("keygroups: malformed type %q", s)
		}
		name, args = strings.TrimSpace(name[:i]), name[i+1:len(name)-1]
	}
	nums, err := typeArgs(args)
	if err != nil {
		return FieldType{}, fmt.Errorf("keygroups: type %q: %w", s, err)
	}
	argc := func(maxN int) error {
		if len(nums) > maxN {
			return fmt.Errorf("keygroups: type %q takes at most %d parameters", s, maxN)
		}
		return nil
	}
	var t FieldType
	switch name {
	case "boolean", "bool":
		t, err = TypeBoolean, argc(0)
	case "tinyint":
		t, err = TypeTinyInt, argc(0)
	case "smallint":
		t, err = TypeSmallInt, argc(0)
	case "int", "integer":
		t, err = TypeInt, argc(0)
	case "bigint":
		t, err = TypeBigInt, argc(0)
	case "float", "real":
		t, err = TypeFloat, argc(0)
	case "double", "double precision":
		t, err = TypeDouble, argc(0)
	case "string", "varchar", "char":
		t, err = TypeString, argc(1)
	case "bytes", "varbinary", "binary":
		t, err = TypeBytes, argc(1)
	case "date":
		t, err = TypeDate, argc(0)
	case "time":
		t, err = TypeTime, argc(1)
	case "timestamp", "timestamp_ltz":
		if err = argc(1); err != nil {
			break
		}
		p := 6
		if len(nums) == 1 {
			p = nums[0]
		}
		t = TypeTimestamp(p)
		if ltz || name == "timestamp_ltz" {
			t = TypeTimestampLTZ(p)
		}
	case "interval year to month", "interval year", "interval month":
		t, err = FieldType{Kind: KindIntervalYearMonth}, argc(1)
	case "interval day to second", "interval day", "interval day to hour", "interval day to minute",
		"interval hour", "interval hour to minute", "interval hour to second", "interval minute",
		"interval minute to second", "interval second":
		t, err = FieldType{Kind: KindIntervalDayTime}, argc(1)
	case "decimal", "numeric", "dec":
		if err = argc(2); err != nil {
			break
		}
		p, sc := 10, 0
		if len(nums) >= 1 {
			p = nums[0]
		}
		if len(nums) == 2 {
			sc = nums[1]
		}
		t = TypeDecimal(p, sc)
	default:
		return FieldType{}, fmt.Errorf("keygroups: unknown SQL type %q", s)
	}
	if err != nil {
		return FieldType{}, err
	}
	if ltz && t.Kind != KindTimestampLTZ {
		return FieldType{}, fmt.Errorf("keygroups: unknown SQL type %q", s)
	}
	if err := t.Validate(); err != nil {
		return FieldType{}, err
	}
	return t, nil
}

func typeArgs(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for _, a := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(a))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad type parameter %q", strings.TrimSpace(a))
		}
		out = append(out, n)
	}
	return out, nil
}

// SplitTopLevel splits s at commas that are not inside parentheses or angle
// brackets ("int, decimal(10, 2)" → ["int", "decimal(10, 2)"]).
func SplitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '<':
			depth++
		case ')', '>':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

// ParseRowType parses "row<t1, t2, …>" (or a bare comma-separated list of
// types) into field types.
func ParseRowType(s string) ([]FieldType, error) {
	inner := strings.TrimSpace(s)
	low := strings.ToLower(inner)
	if strings.HasPrefix(low, "row") {
		rest := strings.TrimSpace(inner[3:])
		if !strings.HasPrefix(rest, "<") || !strings.HasSuffix(rest, ">") {
			return nil, fmt.Errorf("keygroups: malformed row type %q (want row<type, …>)", s)
		}
		inner = rest[1 : len(rest)-1]
	}
	if strings.TrimSpace(inner) == "" {
		return nil, fmt.Errorf("keygroups: row type %q has no fields", s)
	}
	var out []FieldType
	for i, part := range SplitTopLevel(inner) {
		t, err := ParseFieldType(part)
		if err != nil {
			return nil, fmt.Errorf("field %d: %w", i, err)
		}
		out = append(out, t)
	}
	return out, nil
}

// Field is one comma-separated field of a row literal.
type Field struct {
	Text   string
	Quoted bool // written in double quotes; a quoted "null" is a string
}

// IsNull reports whether the field is the unquoted word null.
func (f Field) IsNull() bool {
	return !f.Quoted && strings.EqualFold(strings.TrimSpace(f.Text), "null")
}

// SplitFields splits a row literal into fields at commas. Unquoted fields
// are trimmed of surrounding blanks. A field may be wrapped in double quotes
// to hold commas or leading/trailing spaces, with "" standing for one quote
// inside: `1, "a, b" ,null` → 1 | a, b | null (NULL: see Field.IsNull).
func SplitFields(s string) ([]Field, error) {
	var out []Field
	i := 0
	for {
		// Skip blanks before a quoted field.
		j := i
		for j < len(s) && s[j] == ' ' {
			j++
		}
		if j < len(s) && s[j] == '"' {
			var b strings.Builder
			k := j + 1
			closed := false
			for k < len(s) {
				if s[k] == '"' {
					if k+1 < len(s) && s[k+1] == '"' {
						b.WriteByte('"')
						k += 2
						continue
					}
					closed = true
					k++
					break
				}
				b.WriteByte(s[k])
				k++
			}
			if !closed {
				return nil, fmt.Errorf("keygroups: unterminated quote in %q", s)
			}
			for k < len(s) && s[k] == ' ' {
				k++
			}
			out = append(out, Field{Text: b.String(), Quoted: true})
			if k == len(s) {
				return out, nil
			}
			if s[k] != ',' {
				return nil, fmt.Errorf("keygroups: text after closing quote at offset %d in %q", k, s)
			}
			i = k + 1
			continue
		}
		k := strings.IndexByte(s[i:], ',')
		if k < 0 {
			return append(out, Field{Text: strings.TrimSpace(s[i:])}), nil
		}
		out = append(out, Field{Text: strings.TrimSpace(s[i : i+k])})
		i += k + 1
	}
}

// ParseValue parses the text form of a non-NULL value of type t into the Go
// value RowBuilder accepts (NULL is the caller's business: see Field.IsNull). Forms: integers in decimal; true/false; floats as Go
// parses them; strings verbatim; bytes as hex (optional 0x); DATE as
// YYYY-MM-DD or days; TIME as HH:MM:SS[.fff] or millis of day; TIMESTAMP as
// "YYYY-MM-DD HH:MM:SS[.f…]" (or with T) or epoch millis, TIMESTAMP_LTZ also
// with a zone (RFC 3339), zone-less text meaning UTC; DECIMAL as a decimal
// literal with at most Scale fraction digits. Fraction digits beyond the
// type's precision are rejected, not rounded.
func ParseValue(t FieldType, text string) (any, error) {
	if t.Kind == KindString {
		return text, nil
	}
	s := strings.TrimSpace(text)
	bad := func(what string) error { return fmt.Errorf("keygroups: %q is not a valid %s %s", text, t, what) }
	switch t.Kind {
	case KindBoolean:
		switch strings.ToLower(s) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return nil, bad("(want true or false)")
	case KindTinyInt, KindSmallInt, KindInt, KindBigInt, KindIntervalYearMonth, KindIntervalDayTime:
		size := map[Kind]int{KindTinyInt: 8, KindSmallInt: 16, KindInt: 32, KindIntervalYearMonth: 32}[t.Kind]
		if size == 0 {
			size = 64
		}
		n, err := strconv.ParseInt(s, 10, size)
		if err != nil {
			return nil, bad("value")
		}
		switch size {
		case 8:
			return int8(n), nil
		case 16:
			return int16(n), nil
		case 32:
			return int32(n), nil
		}
		return n, nil
	case KindFloat:
		f, err := strconv.ParseFloat(s, 32)
		if err != nil {
			return nil, bad("value")
		}
		return float32(f), nil
	case KindDouble:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, bad("value")
		}
		return f, nil
	case KindBytes:
		h := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
		b, err := hex.DecodeString(h)
		if err != nil {
			return nil, bad("hex string")
		}
		return b, nil
	case KindDate:
		if n, err := strconv.ParseInt(s, 10, 32); err == nil {
			return int32(n), nil
		}
		d, err := time.Parse("2006-01-02", s)
		if err != nil {
			return nil, bad("(want YYYY-MM-DD or days since epoch)")
		}
		days := d.Unix() / 86400
		if d.Unix() < 0 && d.Unix()%86400 != 0 {
			days--
		}
		return int32(days), nil
	case KindTime:
		if n, err := strconv.ParseInt(s, 10, 32); err == nil {
			return int32(n), nil
		}
		d, err := time.Parse("15:04:05.999999999", s)
		if err != nil {
			return nil, bad("(want HH:MM:SS[.fff] or millis of day)")
		}
		ms := (d.Hour()*3600+d.Minute()*60+d.Second())*1000 + d.Nanosecond()/1e6
		return int32(ms), nil
	case KindTimestamp, KindTimestampLTZ:
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return Timestamp{Millis: n}, nil
		}
		ts, err := parseTimestamp(s, t.Kind == KindTimestampLTZ)
		if err != nil {
			return nil, bad("(want YYYY-MM-DD HH:MM:SS[.f…] or epoch millis)")
		}
		if fractionDigits(s) > t.Precision {
			return nil, bad(fmt.Sprintf("(more than %d fraction digits)", t.Precision))
		}
		return TimestampOf(ts), nil
	case KindDecimal:
		return parseUnscaled(s, t, bad)
	}
	return nil, fmt.Errorf("keygroups: cannot parse values of %s", t)
}

func parseTimestamp(s string, zoned bool) (time.Time, error) {
	layouts := []string{"2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999", "2006-01-02 15:04", "2006-01-02T15:04", "2006-01-02"}
	for _, l := range layouts {
		if ts, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			return ts, nil
		}
	}
	if zoned {
		return time.Parse(time.RFC3339Nano, s)
	}
	return time.Time{}, errors.New("bad timestamp")
}

// fractionDigits counts the digits after the seconds' decimal point.
func fractionDigits(s string) int {
	i := strings.LastIndexByte(s, '.')
	if i < 0 || strings.LastIndexByte(s, ':') > i {
		return 0
	}
	n := 0
	for _, c := range s[i+1:] {
		if c < '0' || c > '9' {
			break
		}
		n++
	}
	return n
}

func parseUnscaled(s string, t FieldType, bad func(string) error) (any, error) {
	neg := false
	switch {
	case strings.HasPrefix(s, "-"):
		neg, s = true, s[1:]
	case strings.HasPrefix(s, "+"):
		s = s[1:]
	}
	intPart, frac, _ := strings.Cut(s, ".")
	if intPart == "" && frac == "" {
		return nil, bad("value")
	}
	for _, p := range []string{intPart, frac} {
		for _, c := range p {
			if c < '0' || c > '9' {
				return nil, bad("value")
			}
		}
	}
	if len(frac) > t.Scale {
		return nil, bad(fmt.Sprintf("(more than %d fraction digits)", t.Scale))
	}
	digits := intPart + frac + strings.Repeat("0", t.Scale-len(frac))
	if len(strings.TrimLeft(digits, "0")) > t.Precision {
		return nil, bad(fmt.Sprintf("(more than %d digits)", t.Precision))
	}
	u, ok := new(big.Int).SetString("0"+digits, 10)
	if !ok {
		return nil, bad("value")
	}
	if neg {
		u.Neg(u)
	}
	return u, nil
}
