//go:build cgo

package command

import "github.com/sfstate/sfstate/verify/restore"

func init() { convertEngine = restore.ConvertNative }
