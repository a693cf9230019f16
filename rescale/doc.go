// Package rescale rewrites a savepoint's `_metadata` for another
// parallelism while leaving the state files where they are.
//
// # What `_metadata` can express
//
// Flink's metadata serializer (MetadataV2V3SerializerBase.serializeSubtaskState)
// writes at most one managed and one raw keyed handle per subtask; a
// collection of more is rejected. On restore, StateAssignmentOperation gives
// new subtask i the recorded subtask i's handle when the new parallelism
// equals the recorded one, and otherwise the intersection of every recorded
// handle with i's key-group range (KeyGroupsStateHandle.getIntersection keeps
// the same file and the sub-array of offsets). A new subtask whose range
// spans two old files can therefore not be written as one view handle.
//
// # Design: a layout parallelism
//
// CanonicalViews records the operator at a layout parallelism K instead: the
// smallest multiple of the target N whose standard ranges
// (keygroups.RangeForSubtask) each lie inside one old handle (K = N when N is
// a multiple of the old parallelism; at most the max parallelism, where every
// range is one key group). Layout subtask j holds one view: the offsets of its
// range in the old handle, the same delegate file. The result is an ordinary
// Flink layout — restored at K, subtask j takes its view; restored at N or
// any other parallelism, Flink intersects and every new subtask receives
// exactly the views of its key groups. Nothing is copied: the bytes written
// are the new `_metadata`. Inline streams are cut to the view's blocks
// (header plus the blocks of its range, byte for byte) so the metadata does
// not repeat them K times.
//
// Operator (non-keyed) state of a keyed operator goes to the first layout
// subtask of its old subtask (split and union lists appear once, as before);
// broadcast-mode states, identical on every subtask, go to every layout
// subtask so each restored subtask finds them. Operators without keyed
// state are copied unchanged: Flink repartitions them itself.
//
// # Which operators get the new parallelism
//
// Options.Parallelism applies to every keyed operator whose max parallelism
// allows it. Flink SQL pins global operators (sorts, limits, non-keyed
// aggregates) at max parallelism 1; such an operator, and any other whose
// max parallelism is below the target, keeps its own parallelism and its
// LayoutStats.Note says so. Options.MaxParallelism likewise never applies
// to an operator pinned at 1. Options.OperatorParallelism and
// OperatorMaxParallelism set single operators (by id, uid or name) and must
// fit them. A target no keyed operator allows is refused.
//
// # References into the source
//
// Relative handles would point outside the destination; they become
// absolute URIs into the source (file:/… or s3://…), or with Options.Copy
// the files are copied (server-side within one store) and stay relative.
// Absolute handles stay absolute, named where the source's read policy
// found them (so a source opened with a path mapping yields an output that
// reads without it). When the new metadata points into the source, Run
// writes savepoint.SourcesName beside it, recording the source directory
// (and the sources the source itself recorded): every reader then follows
// those URIs by default, while other absolute paths stay refused.
//
// # Native handles
//
// Incremental RocksDB handles (tags 5, 11) are kept as they are, rebased to
// absolute URIs: a handle's files form one RocksDB instance, so they cannot
// be split or merged into another handle, and Flink clips a handle only when
// its recorded range differs from the new one (see NativeViews). Every new
// subtask then references all files of the handles overlapping its range,
// nothing copied. For the engine's checkpoints, whose manifest records the
// key groups of every SST file, Run also writes PlanName: per new subtask
// the instances it restores from and only the SST files overlapping its
// range, with the bytes needed, the bytes of whole handles and the bytes of
// files straddling the range boundary (checkpoint.RestorePlanned restores from it).
//
// # Conversion
//
// Options.Canonical (package convert, sfstate convert) uses the same
// rewriter without changing the layout: every keyed operator keeps its
// parallelism and max parallelism and is rewritten into one canonical file
// per subtask with that subtask's own header; heap-layout handles read as
// canonical entries, native RocksDB handles through Request.Native. All
// other files are copied, and the `_metadata` records a CANONICAL
// savepoint.
//
// # Publishing
//
// Run never writes under the source. Data files (copies, rewritten state)
// are written and confirmed first, `_metadata` last with PutIfAbsent
// (s3.CommitMetadata), so a failed run leaves no `_metadata` and an existing
// one is never overwritten.
package rescale
