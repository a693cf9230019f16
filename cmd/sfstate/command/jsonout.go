package command

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// JSON conventions of every --json output. They live in the struct tags of
// the types printed (library types included: consumers decode the output
// with them) and are checked for every command by TestJSONOutputs:
//
//   - keys are camelCase;
//   - 64-bit hashes are decimal strings (`json:",string"`), and no number
//     beyond ±2^53 appears, which JSON parsers that use doubles would round;
//   - durations are seconds as numbers, times RFC 3339 strings (fields that
//     keep another unit name it: ttlMillis);
//   - nothing volatile (the current time) unless asked for (--now).

// writeJSON encodes v indented by two spaces, without HTML escaping.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
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
