package command

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"strings"
	"unicode"
)

// JSON conventions of every --json output (one place: writeJSON):
//
//   - keys are camelCase: PascalCase and snake_case keys of library structs
//     are rewritten ("CheckpointID" → "checkpointId", "bytes_ratio" →
//     "bytesRatio");
//   - 64-bit hashes (keys "hash" or ending in "Hash") are decimal strings,
//     and so is any other integer beyond ±2^53, which JSON parsers that use
//     doubles would round;
//   - durations are seconds as numbers, times RFC 3339 strings (the
//     commands' own structs follow this; library fields named *Millis keep
//     their unit in the name);
//   - nothing volatile (the current time) unless asked for (--now).
//
// Key order is kept.

// writeJSON encodes v indented, normalized to the conventions above.
func writeJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	out, err := normalizeJSON(buf.Bytes())
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}

// normalizeJSON rewrites one JSON document (see writeJSON), indented by two
// spaces and ending in a newline.
func normalizeJSON(b []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out bytes.Buffer
	if err := normValue(dec, &out, "", "", mustToken(dec)); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

func mustToken(dec *json.Decoder) json.Token {
	t, err := dec.Token()
	if err != nil {
		return err
	}
	return t
}

var maxSafe = big.NewInt(1 << 53)

func normValue(dec *json.Decoder, out *bytes.Buffer, indent, key string, t json.Token) error {
	switch v := t.(type) {
	case error:
		return v
	case json.Delim:
		closing := map[json.Delim]byte{'{': '}', '[': ']'}[v]
		out.WriteByte(byte(v))
		inner := indent + "  "
		first := true
		for dec.More() {
			if !first {
				out.WriteByte(',')
			}
			first = false
			out.WriteString("\n" + inner)
			childKey := key
			if v == '{' {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				k, _ := kt.(string)
				childKey = camelKey(k)
				writeString(out, childKey)
				out.WriteString(": ")
			}
			if err := normValue(dec, out, inner, childKey, mustToken(dec)); err != nil {
				return err
			}
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return err
		}
		if !first {
			out.WriteString("\n" + indent)
		}
		out.WriteByte(closing)
	case json.Number:
		s := v.String()
		if n, ok := new(big.Int).SetString(s, 10); ok {
			if isHashKey(key) || n.CmpAbs(maxSafe) > 0 {
				writeString(out, s)
				return nil
			}
		}
		out.WriteString(s)
	case string:
		writeString(out, v)
	case bool:
		fmt.Fprint(out, v)
	case nil:
		out.WriteString("null")
	}
	return nil
}

func writeString(out *bytes.Buffer, s string) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	out.Write(bytes.TrimRight(b.Bytes(), "\n"))
}

func isHashKey(k string) bool { return k == "hash" || strings.HasSuffix(k, "Hash") }

// camelKey converts PascalCase and snake_case keys to camelCase; keys
// already camelCase (and keys that are data, such as state names holding
// spaces or dots) are left alone.
func camelKey(k string) string {
	if k == "" || strings.ContainsAny(k, " ./:-") {
		return k
	}
	if strings.Contains(k, "_") {
		parts := strings.Split(k, "_")
		var b strings.Builder
		for i, p := range parts {
			if p == "" {
				continue
			}
			if i == 0 || b.Len() == 0 {
				b.WriteString(lowerLead(p))
				continue
			}
			b.WriteString(strings.ToUpper(p[:1]) + p[1:])
		}
		return b.String()
	}
	if !unicode.IsUpper(rune(k[0])) {
		return k
	}
	k = lowerLead(k)
	// A trailing "ID" reads as a word: checkpointId.
	if strings.HasSuffix(k, "ID") && len(k) > 2 {
		k = k[:len(k)-2] + "Id"
	}
	return k
}

// lowerLead lowers a leading run of capitals, keeping the last one of a run
// that starts the next word ("CPUSeconds" → "cpuSeconds", "ID" → "id").
func lowerLead(s string) string {
	r := []rune(s)
	n := 0
	for n < len(r) && unicode.IsUpper(r[n]) {
		n++
	}
	if n == 0 {
		return s
	}
	if n > 1 && n < len(r) && unicode.IsLower(r[n]) {
		n--
	}
	for i := 0; i < n; i++ {
		r[i] = unicode.ToLower(r[i])
	}
	return string(r)
}

// plural renders a count with its noun: "1 operator", "2 operators".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "y") && !strings.HasSuffix(noun, "ey") {
		return fmt.Sprintf("%d %sies", n, noun[:len(noun)-1])
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// writeNormalized runs a library's own JSON writer and normalizes what it
// wrote (see writeJSON).
func writeNormalized(w io.Writer, write func(io.Writer) error) error {
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return err
	}
	out, err := normalizeJSON(buf.Bytes())
	if err != nil {
		return err
	}
	_, err = w.Write(out)
	return err
}
