package flinkwrite

import (
	"encoding/binary"
	"fmt"
)

// operatorProxyVersion is the OperatorBackendSerializationProxy version
// written by Flink 1.18 and later (the first with the compression flag).
const operatorProxyVersion = 6

// AppendOperatorHeader appends the header of an operator-state stream
// (OperatorBackendSerializationProxy, version 6; see keyed.ReadOperatorHeader):
//
//	i32 6 | bool compressed |
//	i16 n | n × StateMetaInfo (list states, type OperatorState) |
//	i16 m | m × StateMetaInfo (broadcast states, type BroadcastState)
//
// with meta infos written as in the keyed header (AppendHeader). A list
// state's VALUE_SERIALIZER is its element serializer; a broadcast state has
// KEY_SERIALIZER and VALUE_SERIALIZER. Each state also carries the option
// OPERATOR_STATE_DISTRIBUTION_MODE (SPLIT_DISTRIBUTE, UNION or
// BROADCAST). The data that follows (list elements back to back, a
// broadcast map as i32 size and its entries) is written by the caller at
// the offsets its operator state handle records.
func AppendOperatorHeader(b []byte, compressed bool, list, broadcast []StateMetaInfo) ([]byte, error) {
	b = binary.BigEndian.AppendUint32(b, operatorProxyVersion)
	b = AppendBool(b, compressed)
	for _, states := range [][]StateMetaInfo{list, broadcast} {
		if len(states) > maxStates {
			return b, fmt.Errorf("%w: %d states (max %d)", ErrSnapshot, len(states), maxStates)
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(states)))
		for _, s := range states {
			var err error
			if b, err = appendMetaInfo(b, s); err != nil {
				return b, fmt.Errorf("state %q: %w", s.Name, err)
			}
		}
	}
	return b, nil
}
