package engine

// const char* sfs_rocksdb_version();
import "C"

// RocksDBVersion returns the version of the RocksDB library the engine is
// linked with, e.g. "7.8.3" (asked of the library at run time, not taken
// from the headers it was compiled against).
func RocksDBVersion() string { return C.GoString(C.sfs_rocksdb_version()) }
