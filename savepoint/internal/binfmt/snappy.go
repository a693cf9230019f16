package binfmt

import "hash/crc32"

// Snappy framing format, what xerial's SnappyFramedOutputStream writes and
// Flink's SnappyStreamCompressionDecorator uses (one framed stream per
// key-group block or operator-state partition). Wire format: never change.
//
//	stream identifier: FF 06 00 00 73 4E 61 50 70 59 ("sNaPpY")
//	chunk:             u8 type, u24 little-endian length, payload
//	  0x00 compressed:   u32-LE masked CRC-32C of the uncompressed bytes, snappy block
//	  0x01 uncompressed: u32-LE masked CRC-32C, the bytes
//	  0x02..0x7F reserved (error), 0x80..0xFE skippable (0xFE padding)
//	masked crc = ((crc >> 15) | (crc << 17)) + 0xA282EAD8
//
// keyed.SnappyReader reads it; flinkwrite's framer writes it.
const (
	SnappyChunkCompressed   = 0x00
	SnappyChunkUncompressed = 0x01
	SnappyChunkPadding      = 0xFE
	SnappyChunkStreamID     = 0xFF
	// SnappyBlockSize bounds a chunk's uncompressed bytes (xerial
	// DEFAULT_BLOCK_SIZE, which Flink uses).
	SnappyBlockSize = 64 * 1024
	snappyMaskDelta = 0xA282EAD8
)

// SnappyStreamHeader is the stream identifier chunk that starts every
// framed stream.
var SnappyStreamHeader = []byte{SnappyChunkStreamID, 0x06, 0x00, 0x00, 's', 'N', 'a', 'P', 'p', 'Y'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SnappyMaskedCRC is the masked CRC-32C a chunk records for its
// uncompressed bytes b.
func SnappyMaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + snappyMaskDelta
}
