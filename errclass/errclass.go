// Package errclass is the module's error model: the two classes an input
// failure belongs to, and the error that says where in a file it happened.
//
// Classes. Every package keeps its own sentinels (savepoint.ErrFormat,
// keyed.ErrSnappy, rowcodec.ErrCorrupt, ...), and each sentinel belongs to
// one class, so that errors.Is(err, errclass.ErrCorrupt) or
// errors.Is(err, errclass.ErrUnsupported) answers for any error of the
// module without a list of packages:
//
//   - ErrCorrupt: the input is damaged, truncated or otherwise not what its
//     format allows (a bad magic number, a length past the end, a checksum
//     or CRC-32C mismatch, a key outside its key-group range). The sfstate
//     CLI exits 3 for it (as for missing files and failed reads, which
//     carry no class), and its message names the file and, where known,
//     the offset.
//   - ErrUnsupported: the input is valid but uses a feature this module does
//     not read (an old or future format version, an unknown serializer, a
//     state backend's own layout). The CLI exits 4 for it, and its message
//     names the feature.
//
// A sentinel joins a class by being made with New (or Mark, for one that
// already wraps another sentinel):
//
//	var ErrFormat = errclass.New(errclass.ErrCorrupt, "savepoint: invalid metadata")
//
// errors.Is then matches both the sentinel itself and its class. Failures
// that are neither (a network error, a missing file, a cancelled context)
// carry no class; the CLI sorts those itself.
//
// Positions. A CorruptionError is a failure at a known place in a file:
// File and Offset (-1 when unknown) and the cause. Decoders that only see a
// byte slice fill Offset and leave File empty; the layer that opened the
// file adds its name with WithFile. errors.As(err, &ce) with
// ce *errclass.CorruptionError recovers the position of any decoder error
// that knows one: the decoding helper's offset error is a CorruptionError,
// and the richer position types (keyed.Error with its key group,
// savepoint.ChangeSetError, native.FileError) keep their fields and let
// errors.As see them as one.
package errclass

import (
	"errors"
	"fmt"
)

// ErrCorrupt is the class of damaged, truncated or unreadable input.
var ErrCorrupt = errors.New("corrupt data")

// ErrUnsupported is the class of well-formed input in a form or version
// this module does not read. Its text is the bare word: messages read
// "unsupported metadata version 99".
var ErrUnsupported = errors.New("unsupported")

// classed is a sentinel (or any error) that belongs to a class.
type classed struct {
	class error
	err   error // the error's own text and chain
}

func (e *classed) Error() string { return e.err.Error() }
func (e *classed) Unwrap() error { return e.err }

// Is matches the class (errors.Is matches the sentinel itself by identity).
func (e *classed) Is(target error) bool { return target == e.class }

// New returns a sentinel error with text msg belonging to class (ErrCorrupt
// or ErrUnsupported): errors.Is matches it and its class.
func New(class error, msg string) error {
	return &classed{class: class, err: errors.New(msg)}
}

// Mark returns err put into class: same text, errors.Is still matches
// everything err matches, and class besides. It is for sentinels built on
// another one, e.g. an S3 integrity failure that is both a permanent S3
// error and corrupt data.
func Mark(class, err error) error {
	return &classed{class: class, err: err}
}

// CorruptionError is a failure at a known position of a file. File is the
// file's name as the user knows it ("" when the decoder that failed saw
// only bytes); Offset is the byte offset in it (-1 when unknown).
//
// It is of class ErrCorrupt, unless its cause is of class ErrUnsupported
// (a position inside valid input whose form is not read keeps that class).
type CorruptionError struct {
	File   string
	Offset int64
	Err    error
}

// Error reads "FILE at offset N: cause", leaving out what is unknown (and
// the offset when the cause already names it, see WithFile).
func (e *CorruptionError) Error() string {
	msg := "<nil>"
	if e.Err != nil {
		msg = e.Err.Error()
	}
	switch {
	case e.File != "" && e.Offset >= 0 && !e.causeAt():
		return fmt.Sprintf("%s at offset %d: %s", e.File, e.Offset, msg)
	case e.File != "":
		return e.File + ": " + msg
	case e.Offset >= 0:
		return fmt.Sprintf("at offset %d: %s", e.Offset, msg)
	}
	return msg
}

// causeAt reports whether e's cause holds an unnamed CorruptionError at
// e's offset (whose message says "at offset N" already).
func (e *CorruptionError) causeAt() bool {
	var in *CorruptionError
	return errors.As(e.Err, &in) && in.File == "" && in.Offset == e.Offset
}

func (e *CorruptionError) Unwrap() error { return e.Err }

// Is reports the class ErrCorrupt (see the type's doc).
func (e *CorruptionError) Is(target error) bool {
	return target == ErrCorrupt && !errors.Is(e.Err, ErrUnsupported)
}

// Corruptf returns a CorruptionError at file and off whose cause is of
// class ErrCorrupt, with the formatted text.
func Corruptf(file string, off int64, format string, args ...any) error {
	return &CorruptionError{File: file, Offset: off, Err: &classed{class: ErrCorrupt, err: fmt.Errorf(format, args...)}}
}

// AtOffset returns err at offset off of a file not yet named (nil for a
// nil err). An err that already carries a position is returned as it is:
// the innermost decoder knows the position best.
func AtOffset(err error, off int64) error {
	if err == nil {
		return nil
	}
	var ce *CorruptionError
	if errors.As(err, &ce) {
		return err
	}
	return &CorruptionError{File: "", Offset: off, Err: err}
}

// WithFile names the file err happened in (nil for a nil err):
//
//   - a CorruptionError without a file name gets it (in a copy), so that
//     the message reads "FILE at offset N: ..." once;
//   - an error wrapping one becomes a CorruptionError of the file at that
//     offset (its message "FILE: context: at offset N: ...");
//   - an error without a position becomes one at an unknown offset;
//   - an error whose position names a file already is returned as it is.
func WithFile(err error, file string) error {
	if err == nil {
		return nil
	}
	var ce *CorruptionError
	if !errors.As(err, &ce) {
		return &CorruptionError{File: file, Offset: -1, Err: err}
	}
	if ce.File != "" {
		return err
	}
	if direct, ok := err.(*CorruptionError); ok {
		c := *direct
		c.File = file
		return &c
	}
	return &CorruptionError{File: file, Offset: ce.Offset, Err: err}
}

// Position returns the file and offset err carries ("" and -1 when none).
func Position(err error) (file string, off int64) {
	var ce *CorruptionError
	if errors.As(err, &ce) {
		return ce.File, ce.Offset
	}
	return "", -1
}
