//go:build cgo

package command

import "github.com/sfstate/sfstate/verify/restore"

func init() {
	verifyRestorer = &restore.Restorer{}
	verifyNative = restore.VerifyNative
	verifyCompareNative = restore.CompareNative
}
