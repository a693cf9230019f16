//go:build !unix

package statediff

import "time"

func maxRSS() int64 { return 0 }

func cpuTime() time.Duration { return 0 }
