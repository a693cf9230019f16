package command

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/sfstate/sfstate/errclass"
	"github.com/sfstate/sfstate/keygroups"
	"github.com/sfstate/sfstate/rescale"
	"github.com/sfstate/sfstate/s3"
	"github.com/sfstate/sfstate/savepoint"
	"github.com/sfstate/sfstate/verify"
	"github.com/urfave/cli/v2"
)

// The error classes behind the exit codes. Which class an error belongs to
// is decided here only (ExitCode): corrupt and unsupported input by the
// module's two classes (package errclass), which every decoder's sentinel
// belongs to; the rest from the sentinels below. The code a command
// attached with Fail is a hint that a class in the chain overrides where it
// is more specific.
var (
	// usageErrs: the command line asked for something impossible.
	usageErrs = []error{keygroups.ErrParallelism, s3.ErrBadKey, rescale.ErrExists, rescale.ErrOptions}
	// ioErrs: input that could not be read, beside errclass.ErrCorrupt
	// (damaged input): missing or forbidden files and objects, S3 failures
	// that retrying does not mend, a source verify cannot read at all.
	ioErrs = []error{verify.ErrUnreadable, s3.ErrNotExist, s3.ErrPermanent, fs.ErrNotExist, fs.ErrPermission}
	// differErrs: a comparison found differences.
	differErrs []error
)

// (exitcode_cgo.go adds the sentinels of the packages that link RocksDB.)

// ExitCode maps an error to the documented exit code:
//
//	0    ok
//	1    check, verify or diff found differences
//	2    usage: unknown command or flag, bad flag value
//	3    corrupt (errclass.ErrCorrupt) or unreadable input (the message names
//	     file and offset)
//	4    valid input that sfstate does not support (errclass.ErrUnsupported;
//	     the message names the feature)
//	130  interrupted (SIGINT/SIGTERM)
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, context.Canceled) {
		return ExitInterrupted
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	hint := -1
	var ee *ExitError
	if errors.As(err, &ee) {
		hint = ee.Code
	}
	switch {
	case hint == ExitCheckFailed || isAny(err, differErrs):
		return ExitCheckFailed
	case errors.Is(err, errclass.ErrUnsupported):
		// Before usage: a command may have judged "not supported" a usage
		// mistake, but the input is valid and the feature missing.
		return ExitUnsupported
	case hint == ExitUsage || isAny(err, usageErrs):
		return ExitUsage
	case hint == ExitUnsupported:
		return ExitUnsupported
	case hint == ExitIO || errors.Is(err, errclass.ErrCorrupt) || isAny(err, ioErrs):
		return ExitIO
	}
	var ce cli.ExitCoder
	if errors.As(err, &ce) && ce.ExitCode() != 0 {
		return ce.ExitCode()
	}
	// urfave/cli reports a missing required flag as a plain error.
	if msg := err.Error(); strings.HasPrefix(msg, "Required flag") || strings.HasPrefix(msg, "flag provided but not defined") {
		return ExitUsage
	}
	// Anything else went wrong while reading or writing state.
	return ExitIO
}

func isAny(err error, targets []error) bool {
	for _, t := range targets {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// errorContext is what Message knows about the invocation: the positional
// arguments as the user typed them.
type errorContext struct {
	args []string
}

var (
	// "operation error S3: GetObject, https response error StatusCode: 403,
	// RequestID: X, HostID: Y, api error AccessDenied: Access Denied"
	sdkErrRE   = regexp.MustCompile(`operation error [^,]+, (?:https )?response error StatusCode: (\d+)(?:, RequestID: [^,]*)?(?:, HostID: [^,]*)?(?:, (?:api error )?([A-Za-z]+)?:? ?([^\n]*))?`)
	offsetRE   = regexp.MustCompile(`at offset (\d+): `)
	atoiRE     = regexp.MustCompile(`strconv\.Parse(?:Int|Uint|Float|Bool)?: parsing "([^"]*)": (invalid syntax|value out of range)`)
	atoiFullRE = regexp.MustCompile(`strconv\.Atoi: parsing "([^"]*)": (invalid syntax|value out of range)`)
	requiredRE = regexp.MustCompile(`Required flags? "(.*)" (?:is|are)? ?not set`)
	objTwiceRE = regexp.MustCompile(`(\S+)/([^/\s:]+): (\S+): (\w+) ([^/\s:]+): `)
	flagValRE  = regexp.MustCompile(`^invalid value "([^"]*)" for flag -{1,2}([A-Za-z0-9-]+): (.*)$`)
	boolValRE  = regexp.MustCompile(`^invalid boolean value "([^"]*)" for -{1,2}([A-Za-z0-9-]+): (.*)$`)
)

// Message renders err as the one line the user sees: no repeated offsets,
// no SDK request ids, no Go parser jargon, the user's own path for a
// missing local input.
func Message(err error, ec errorContext) string {
	if err == nil {
		return ""
	}
	if errors.Is(err, context.Canceled) {
		return "interrupted"
	}
	if p, ok := missingLocalArg(err, ec); ok {
		return p
	}
	msg := err.Error()
	// SDK errors joined under the package's sentinels (errors.Join puts
	// them on their own lines).
	sdk := sdkErrRE.MatchString(msg)
	msg = sdkErrRE.ReplaceAllStringFunc(msg, func(s string) string {
		m := sdkErrRE.FindStringSubmatch(s)
		out := "HTTP " + m[1]
		if m[2] != "" {
			out += " " + m[2]
		}
		if t := strings.TrimSpace(m[3]); t != "" && t != m[2] {
			out += ": " + t
		}
		return out
	})
	var ae smithy.APIError
	var re *awshttp.ResponseError
	if sdk || errors.As(err, &ae) || errors.As(err, &re) {
		// The sentinel line says less than the status line that follows.
		for _, s := range []string{s3.ErrNotExist.Error() + "\n", s3.ErrPermanent.Error() + "\n", s3.ErrExists.Error() + "\n"} {
			msg = strings.ReplaceAll(msg, s, "")
		}
	}
	msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", "; ")), " ")
	// Flag values urfave could not parse (flagUsageError names the type
	// when it knows the flag).
	if m := flagValRE.FindStringSubmatch(msg); m != nil {
		msg = flagValueMessage(m[2], m[1], nil)
	}
	msg = atoiFullRE.ReplaceAllStringFunc(msg, func(s string) string { return numberText(atoiFullRE.FindStringSubmatch(s)) })
	msg = atoiRE.ReplaceAllStringFunc(msg, func(s string) string { return numberText(atoiRE.FindStringSubmatch(s)) })
	msg = requiredRE.ReplaceAllStringFunc(msg, func(s string) string {
		var names []string
		for _, n := range strings.Split(requiredRE.FindStringSubmatch(s)[1], `", "`) {
			names = append(names, dashed(n))
		}
		return strings.Join(names, ", ") + " required"
	})
	msg = oneOffset(msg)
	// "DIR/_metadata: DIR: stat _metadata: ..." names one object twice.
	msg = objTwiceRE.ReplaceAllStringFunc(msg, func(s string) string {
		m := objTwiceRE.FindStringSubmatch(s)
		if m[1] != m[3] || m[2] != m[5] {
			return s
		}
		return m[1] + "/" + m[2] + ": " + m[4] + ": "
	})
	msg = strings.TrimPrefix(msg, "savepoint: ")
	return msg
}

// oneOffset drops repeats of "at offset N: " (nested decoders each naming
// the same position) and the decoding helper's package label.
func oneOffset(msg string) string {
	seen := map[string]bool{}
	msg = offsetRE.ReplaceAllStringFunc(msg, func(s string) string {
		if seen[s] {
			return ""
		}
		seen[s] = true
		return s
	})
	return strings.ReplaceAll(msg, "binfmt: ", "")
}

func numberText(m []string) string {
	if m[2] == "value out of range" {
		return fmt.Sprintf("%q is out of range", m[1])
	}
	return fmt.Sprintf("%q is not a number", m[1])
}

// missingLocalArg names a local input the user gave that does not exist
// (or is a directory without a _metadata file) when err says something
// was not found.
func missingLocalArg(err error, ec errorContext) (string, bool) {
	if !errors.Is(err, s3.ErrNotExist) && !errors.Is(err, fs.ErrNotExist) {
		return "", false
	}
	for _, a := range ec.args {
		if a == "" || a == "-" || strings.Contains(a, "://") {
			continue
		}
		fi, serr := os.Stat(a)
		switch {
		case serr != nil && errors.Is(serr, fs.ErrNotExist):
			return "no such file or directory: " + a, true
		case serr == nil && fi.IsDir():
			if _, merr := os.Stat(a + "/" + savepoint.MetadataName); merr != nil && !hasChk(a) {
				return a + ": no " + savepoint.MetadataName + " file (not a savepoint or checkpoint directory)", true
			}
		}
	}
	return "", false
}

// hasChk reports whether dir holds a chk-<id> directory (a checkpoint store).
func hasChk(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if _, ok := savepoint.CheckpointDirID(e.Name()); ok && e.IsDir() {
			return true
		}
	}
	return false
}

// causeChain lists err and every error it wraps, one per line (--verbose).
func causeChain(err error) []string {
	var out []string
	for depth := 0; err != nil && depth < 32; depth++ {
		out = append(out, fmt.Sprintf("%T: %s", err, strings.ReplaceAll(err.Error(), "\n", "; ")))
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				for _, l := range causeChain(e) {
					out = append(out, "  "+l)
				}
			}
			return out
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return out
		}
	}
	return out
}

// flagUsageError turns urfave's "invalid value "x" for flag -name: parse
// error" into a message that says what the flag wants.
func flagUsageError(c *cli.Context, err error) error {
	if m := boolValRE.FindStringSubmatch(err.Error()); m != nil {
		return &UsageError{Msg: flagValueMessage(m[2], m[1], &cli.BoolFlag{})}
	}
	m := flagValRE.FindStringSubmatch(err.Error())
	if m == nil {
		return Fail(ExitUsage, err)
	}
	var flags []cli.Flag
	if c.Command != nil {
		flags = append(flags, c.Command.Flags...)
	}
	flags = append(flags, c.App.Flags...)
	var f cli.Flag
	for _, fl := range flags {
		for _, n := range fl.Names() {
			if n == m[2] {
				f = fl
			}
		}
	}
	return &UsageError{Msg: flagValueMessage(m[2], m[1], f)}
}

func flagValueMessage(name, value string, f cli.Flag) string {
	switch f.(type) {
	case *cli.DurationFlag:
		return fmt.Sprintf("%s: %q is not a duration (e.g. 90s, 15m, 24h)", dashed(name), value)
	case *cli.BoolFlag:
		return fmt.Sprintf("%s: %q is not true or false", dashed(name), value)
	case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag, *cli.Float64Flag, nil:
		if isNumber(value) {
			return fmt.Sprintf("%s: %q is out of range", dashed(name), value)
		}
		return fmt.Sprintf("%s: %q is not a number", dashed(name), value)
	}
	return fmt.Sprintf("%s: %q is not a valid value", dashed(name), value)
}
