//go:build !unix

package statediff

func maxRSS() int64 { return 0 }
