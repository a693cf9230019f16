package command

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// UsageError is a command-line mistake found before any command ran: an
// unknown command or flag, or a flag without its value. It always maps to
// ExitUsage.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// level is one step of the command path: the app itself or a (sub)command.
type level struct {
	name  string // "" for the app
	flags []cli.Flag
	subs  []*cli.Command
	run   bool // has an Action of its own (takes positional arguments)
}

// normalizeArgs reorders the arguments (program name excluded) so that
// urfave/cli, whose flag parsing stops at the first positional argument,
// sees every flag right after the (sub)command that defines it:
//
//	global-flags CMD cmd-flags SUB sub-flags -- positional...
//
// A flag may therefore be written before or after positional arguments, and
// a global flag (--json, --quiet, ...) after the command. Rules:
//
//   - `--` ends the flags: everything after it is positional;
//   - a flag that takes a value consumes the next argument whatever it looks
//     like (a path, a negative number), unless written --flag=value;
//   - a bool flag never consumes the next argument (--flag=false sets it);
//   - an argument that is not a defined flag but a number (-1, -0.5) is
//     positional, as is a lone "-" (standard input);
//   - anything else that starts with '-' is an unknown flag: a UsageError
//     naming the command and the nearest defined flag.
//
// `help` as a command, and everything after it, is passed through as given.
func normalizeArgs(app *cli.App, args []string) ([]string, error) {
	chain := []level{{flags: withHelp(app.Flags, app.HideHelp), subs: app.Commands, run: true}}
	buckets := [][]string{nil}
	var names []string // command path after the app
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) > 1 && a[0] == '-' {
			name, hasValue := splitFlag(a)
			li, f := findFlag(chain, name)
			if f == nil {
				if isNumber(a) {
					pos = append(pos, a)
					continue
				}
				return nil, unknownFlag(chain, names, name)
			}
			buckets[li] = append(buckets[li], a)
			if !hasValue && takesValue(f) {
				if i+1 >= len(args) {
					return nil, &UsageError{Msg: fmt.Sprintf("%s: %s needs a value", cmdPath(names), dashed(name))}
				}
				i++
				buckets[li] = append(buckets[li], args[i])
			}
			continue
		}
		cur := chain[len(chain)-1]
		if len(pos) == 0 && len(cur.subs) > 0 {
			if a == "help" || a == "h" {
				return join(chain, buckets, names, append([]string{a}, args[i+1:]...), true), nil
			}
			if c := findCommand(cur.subs, a); c != nil {
				chain = append(chain, level{name: c.Name, flags: withHelp(c.Flags, c.HideHelp), subs: c.Subcommands, run: c.Action != nil})
				buckets = append(buckets, nil)
				names = append(names, c.Name)
				continue
			}
			if len(chain) == 1 || !cur.run {
				return nil, unknownCommand(cur, names, a)
			}
		}
		pos = append(pos, a)
	}
	return join(chain, buckets, names, pos, false), nil
}

// join lays the buckets out after their commands; raw tails are appended
// without a "--".
func join(chain []level, buckets [][]string, names []string, tail []string, raw bool) []string {
	var out []string
	for i := range chain {
		if i > 0 {
			out = append(out, names[i-1])
		}
		out = append(out, buckets[i]...)
	}
	if len(tail) > 0 {
		if !raw {
			out = append(out, "--")
		}
		out = append(out, tail...)
	}
	return out
}

func withHelp(flags []cli.Flag, hide bool) []cli.Flag {
	if hide {
		return flags
	}
	return append(append([]cli.Flag(nil), flags...), cli.HelpFlag)
}

// splitFlag returns the name of "-x", "--name" or "--name=value".
func splitFlag(a string) (name string, hasValue bool) {
	s := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
	name, _, hasValue = strings.Cut(s, "=")
	return name, hasValue
}

// findFlag looks the name up from the innermost command outwards.
func findFlag(chain []level, name string) (int, cli.Flag) {
	for i := len(chain) - 1; i >= 0; i-- {
		for _, f := range chain[i].flags {
			for _, n := range f.Names() {
				if n == name {
					return i, f
				}
			}
		}
	}
	return -1, nil
}

func takesValue(f cli.Flag) bool {
	if d, ok := f.(cli.DocGenerationFlag); ok {
		return d.TakesValue()
	}
	return true
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func cmdPath(names []string) string {
	return strings.Join(append([]string{"sfstate"}, names...), " ")
}

func unknownFlag(chain []level, names []string, name string) error {
	var cands []string
	for _, l := range chain {
		for _, f := range l.flags {
			for _, n := range f.Names() {
				cands = append(cands, dashed(n))
			}
		}
	}
	msg := fmt.Sprintf("%s: unknown flag %s", cmdPath(names), dashed(name))
	if s := nearest(dashed(name), cands); s != "" {
		msg += fmt.Sprintf(" (did you mean %s?)", s)
	}
	return &UsageError{Msg: msg}
}

func unknownCommand(cur level, names []string, name string) error {
	var cands []string
	for _, c := range cur.subs {
		if !c.Hidden {
			cands = append(cands, c.Names()...)
		}
	}
	what := "command"
	if len(names) > 0 {
		what = "subcommand"
	}
	msg := fmt.Sprintf("%s: unknown %s %q", cmdPath(names), what, name)
	if s := nearest(name, cands); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	sort.Strings(cands)
	if len(cands) > 0 {
		msg += "; one of: " + strings.Join(cands, ", ")
	}
	return &UsageError{Msg: msg}
}

// nearest returns the candidate closest to s in edit distance, or "" when
// none is close enough to be a likely typo (or a prefix of s's intent).
func nearest(s string, cands []string) string {
	best, bestD := "", 1<<30
	for _, c := range cands {
		d := editDistance(s, c)
		if strings.HasPrefix(c, s) && len(s) > 3 {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = c, d
		}
	}
	if bestD <= max(2, len(s)/3) {
		return best
	}
	return ""
}

// editDistance is the Levenshtein distance of two strings (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
