package statediff

import "runtime"

// darwin reports ru_maxrss in bytes, the other Unixes in kilobytes.
const darwin = runtime.GOOS == "darwin"
