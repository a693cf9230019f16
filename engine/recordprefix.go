package engine

// #include <stdlib.h>
// #include "recordprefix.h"
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// RecordStateName is the engine state of the join record layout (package
// recordstore's RecordStateName, a map state): its column family gets the
// record prefix extractor and a memtable prefix bloom in its options when
// the instance opens (unless RocksOptions.NoRecordPrefix), so the first
// memtable after an open or a restore has the bloom too.
const RecordStateName = "join-records"

// RecordMemtableBloomRatio sizes the record family's memtable prefix bloom
// as a fraction of its write buffer (memtable_prefix_bloom_size_ratio).
const RecordMemtableBloomRatio = 0.1

// recordPrefixState reports whether s is the join record layout's state.
func recordPrefixState(s StateDesc) bool {
	return s.Name == RecordStateName && s.Kind == KindMap
}

// setRecordPrefix puts the record prefix extractor for key-group width w
// and the memtable prefix bloom into o.
func setRecordPrefix(o *grocksdb.Options, w int) error {
	if rc := C.sfs_options_set_record_prefix(nativeOptions(o), C.int(w), C.double(RecordMemtableBloomRatio)); rc != 0 {
		return fmt.Errorf("engine: setting the record prefix extractor (width %d) failed (%d)", w, int(rc))
	}
	return nil
}

// RecordPrefixExtractor registers (once per process) and returns the name
// of the RocksDB prefix extractor of the join record layout for key-group
// width w (1 or 2 bytes), for a "prefix_extractor" option: the prefix of a
// key is its complete group prefix kg | side | uvarint len | equality key
// (package recordstore's key layout); keys without a complete group prefix
// are outside its domain. Set on a column family, it makes the bloom
// filters hold group prefixes, so a seek to a group skips the files (and,
// with memtable_prefix_bloom_size_ratio, the memtables) that lack it.
//
// The name is stored in every SST file written with it; a process that
// reads such files without having called this function (or any other
// reader) simply does not use their prefix filters.
func RecordPrefixExtractor(w int) (string, error) {
	if w != 1 && w != 2 {
		return "", fmt.Errorf("engine: record prefix extractor: key-group width %d (want 1 or 2)", w)
	}
	if rc := C.sfs_record_prefix_register(); rc != 0 {
		return "", fmt.Errorf("engine: registering the record prefix extractor failed (%d)", int(rc))
	}
	return fmt.Sprintf("sfstate.JoinGroupPrefix.%d", w), nil
}

// RecordPrefixLen is the record prefix extractor's prefix length of key for
// key-group width w, or -1 when the key is outside its domain: the native
// code RocksDB calls, exposed for tests.
func RecordPrefixLen(w int, key []byte) int {
	var p *C.char
	if len(key) > 0 {
		p = (*C.char)(unsafe.Pointer(&key[0]))
	}
	return int(C.sfs_record_prefix_len(C.int(w), p, C.size_t(len(key))))
}
