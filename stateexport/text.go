package stateexport

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// Text formats (CSV, JSON lines) render each column through a formatter
// chosen once per record batch by the array's type. The common types
// (integers, floats, booleans, strings, bytes, timestamps) are appended
// straight to the line buffer with the exact text Arrow's ValueStr (CSV)
// and encoding/json of GetOneForMarshal (JSON) give; other types go
// through those functions.

// textCol appends row i of one column to b; null rows are handled by the
// caller.
type textCol func(b []byte, i int) ([]byte, error)

// timestampText returns the function that renders values of a timestamp
// type as Arrow's ValueStr does.
func timestampText(typ *arrow.TimestampType) (func(b []byte, v arrow.Timestamp) []byte, error) {
	toTime, err := typ.GetToTimeFunc()
	if err != nil {
		return nil, err
	}
	if typ.TimeZone == "" || typ.TimeZone == "UTC" {
		perSec, err := unitsPerSecond(typ.Unit)
		if err != nil {
			return nil, err
		}
		utc := typ.TimeZone != ""
		return func(b []byte, v arrow.Timestamp) []byte { return appendTimestamp(b, int64(v), perSec, utc) }, nil
	}
	return func(b []byte, v arrow.Timestamp) []byte {
		t := toTime(v)
		if t.Year() < 0 || t.Year() > 9999 {
			return strconv.AppendInt(b, int64(v), 10)
		}
		layout := time.RFC3339Nano
		if typ.TimeZone == "" {
			layout = "2006-01-02T15:04:05.999999999"
		} else if _, off := t.Zone(); off%60 != 0 {
			layout = "2006-01-02T15:04:05.999999999Z07:00:00"
		}
		return t.AppendFormat(b, layout)
	}, nil
}

// unitsPerSecond is the count of unit in one second.
func unitsPerSecond(u arrow.TimeUnit) (int64, error) {
	switch u {
	case arrow.Second:
		return 1, nil
	case arrow.Millisecond:
		return 1e3, nil
	case arrow.Microsecond:
		return 1e6, nil
	case arrow.Nanosecond:
		return 1e9, nil
	}
	return 0, fmt.Errorf("stateexport: time unit %v", u)
}

// appendTimestamp appends v (perSec units per second since the epoch) as
// time.Time.AppendFormat writes it in UTC with the layout
// "2006-01-02T15:04:05.999999999" (no zone) or time.RFC3339Nano (utc: a
// trailing Z): the fraction without trailing zeros, no dot when it is
// zero; years outside 0..9999 as the plain integer. It is that layout
// without going through time.Time (a calendar conversion per call).
func appendTimestamp(b []byte, v, perSec int64, utc bool) []byte {
	sec, frac := v/perSec, v%perSec
	if frac < 0 {
		sec, frac = sec-1, frac+perSec
	}
	days, rem := sec/86400, sec%86400
	if rem < 0 {
		days, rem = days-1, rem+86400
	}
	// Civil date from days since 1970-01-01 (proleptic Gregorian).
	z := days + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if m > 12 {
		m -= 12
	}
	if m <= 2 {
		y++
	}
	if y < 0 || y > 9999 {
		return strconv.AppendInt(b, v, 10)
	}
	two := func(b []byte, n int64) []byte { return append(b, byte('0'+n/10), byte('0'+n%10)) }
	b = two(two(b, y/100), y%100)
	b = two(append(b, '-'), m)
	b = two(append(b, '-'), d)
	b = two(append(b, 'T'), rem/3600)
	b = two(append(b, ':'), rem/60%60)
	b = two(append(b, ':'), rem%60)
	if frac != 0 {
		ns := frac * (1e9 / perSec)
		var digits [9]byte
		for i := 8; i >= 0; i-- {
			digits[i] = byte('0' + ns%10)
			ns /= 10
		}
		n := 9
		for digits[n-1] == '0' {
			n--
		}
		b = append(append(b, '.'), digits[:n]...)
	}
	if utc {
		b = append(b, 'Z')
	}
	return b
}

// plainText returns the formatter of integer and boolean columns, whose
// text is the same in CSV and JSON, or nil for other columns.
func plainText(a arrow.Array) textCol {
	switch x := a.(type) {
	case *array.Int8:
		return func(b []byte, i int) ([]byte, error) { return strconv.AppendInt(b, int64(x.Value(i)), 10), nil }
	case *array.Int16:
		return func(b []byte, i int) ([]byte, error) { return strconv.AppendInt(b, int64(x.Value(i)), 10), nil }
	case *array.Int32:
		return func(b []byte, i int) ([]byte, error) { return strconv.AppendInt(b, int64(x.Value(i)), 10), nil }
	case *array.Int64:
		return func(b []byte, i int) ([]byte, error) { return strconv.AppendInt(b, x.Value(i), 10), nil }
	case *array.Boolean:
		return func(b []byte, i int) ([]byte, error) { return strconv.AppendBool(b, x.Value(i)), nil }
	}
	return nil
}

// csvText returns the CSV formatter of column a: ValueStr's text, quoted
// as encoding/csv quotes it.
func csvText(a arrow.Array) textCol {
	if f := plainText(a); f != nil {
		return f
	}
	switch x := a.(type) {
	case *array.Float32:
		return func(b []byte, i int) ([]byte, error) {
			return strconv.AppendFloat(b, float64(x.Value(i)), 'g', -1, 32), nil
		}
	case *array.Float64:
		return func(b []byte, i int) ([]byte, error) { return strconv.AppendFloat(b, x.Value(i), 'g', -1, 64), nil }
	case *array.String:
		return func(b []byte, i int) ([]byte, error) { return appendCSVField(b, x.Value(i)), nil }
	case *array.Binary:
		return func(b []byte, i int) ([]byte, error) { return base64.StdEncoding.AppendEncode(b, x.Value(i)), nil }
	case *array.Timestamp:
		if f, err := timestampText(x.DataType().(*arrow.TimestampType)); err == nil {
			// Time stamps need no quotes (digits, '-', ':', '.', 'T', 'Z'
			// or a zone offset).
			return func(b []byte, i int) ([]byte, error) { return f(b, x.Value(i)), nil }
		}
	}
	return func(b []byte, i int) ([]byte, error) { return appendCSVField(b, a.ValueStr(i)), nil }
}

// appendCSVField appends a field as encoding/csv's Writer (comma ',',
// "\n" line ends) writes it.
func appendCSVField(b []byte, s string) []byte {
	if !csvNeedsQuotes(s) {
		return append(b, s...)
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			b = append(b, '"', '"')
		} else {
			b = append(b, s[i])
		}
	}
	return append(b, '"')
}

func csvNeedsQuotes(s string) bool {
	if s == "" {
		return false
	}
	if s == `\.` {
		return true
	}
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\n', '\r', '"', ',':
			return true
		}
	}
	r, _ := utf8.DecodeRuneInString(s)
	return isSpace(r)
}

// isSpace is unicode.IsSpace.
func isSpace(r rune) bool {
	if r <= 0xff {
		switch r {
		case '\t', '\n', '\v', '\f', '\r', ' ', 0x85, 0xA0:
			return true
		}
		return false
	}
	switch {
	case r == 0x1680, r >= 0x2000 && r <= 0x200a, r == 0x2028, r == 0x2029, r == 0x202f, r == 0x205f, r == 0x3000:
		return true
	}
	return false
}

// jsonText returns the JSON formatter of column a: the JSON of its
// GetOneForMarshal value as encoding/json writes it.
func jsonText(a arrow.Array) textCol {
	if f := plainText(a); f != nil {
		return f
	}
	switch x := a.(type) {
	case *array.Float32:
		return func(b []byte, i int) ([]byte, error) { return appendJSONFloat(b, float64(x.Value(i)), 32) }
	case *array.Float64:
		return func(b []byte, i int) ([]byte, error) { return appendJSONFloat(b, x.Value(i), 64) }
	case *array.String:
		return func(b []byte, i int) ([]byte, error) { return appendJSONString(b, x.Value(i)), nil }
	case *array.Binary:
		return func(b []byte, i int) ([]byte, error) {
			b = append(b, '"')
			return append(base64.StdEncoding.AppendEncode(b, x.Value(i)), '"'), nil
		}
	case *array.Timestamp:
		if f, err := timestampText(x.DataType().(*arrow.TimestampType)); err == nil {
			return func(b []byte, i int) ([]byte, error) {
				b = append(b, '"')
				return append(f(b, x.Value(i)), '"'), nil
			}
		}
	}
	return func(b []byte, i int) ([]byte, error) {
		v, err := json.Marshal(a.GetOneForMarshal(i))
		return append(b, v...), err
	}
}

// appendJSONFloat appends f as encoding/json encodes a float of the given
// bit size.
func appendJSONFloat(b []byte, f float64, bits int) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return b, fmt.Errorf("json: unsupported value: %s", strconv.FormatFloat(f, 'g', -1, bits))
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	b = strconv.AppendFloat(b, f, format, -1, bits)
	if format == 'e' {
		// e-09 to e-9, as encoding/json writes it
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string the way encoding/json's
// Marshal writes it (HTML-safe: <, > and & escaped; invalid UTF-8 as
// U+FFFD; U+2028 and U+2029 escaped).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
