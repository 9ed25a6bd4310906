// Package steppack makes the packed rows of a ragged stream on the step
// pipeline (package steppipe): the concat packing of a loader, whose step
// s holds tokens [s*R*L, (s+1)*R*L) of the stream of tokens that the
// records of the sampler's steps make laid end to end (R rows of L tokens;
// with a data-parallel world, rank r's stretch of the global step).
//
// # The plan
//
// Which records a step holds depends on the lengths of every record drawn
// before it, which only the table of the store knows, and on a draw (a
// mixture's) that may be Python code. So the records come from a [Plan]:
// the caller appends the records of the sampler's steps, in order, with
// their lengths, a chunk of steps at a time, ahead of the steps asked for;
// the pipeline's workers make every step whose tokens the plan holds
// ([Concat.Limit] is the first one it does not) and the consumer appends
// more when it gets near the end. A chunk appended is never changed, so a
// worker reads the plan under a shared lock only while it finds its
// records.
//
// # A step
//
// [Concat.MakeStep] finds the step's records in the plan (from the one
// holding its first token to the one holding its last), gathers them
// whole (a checked read covers whole records) back to back into the
// slot's data, checks their sizes against the lengths the plan was made
// with, and writes, per token, its segment id (from 1 in each row) and
// position (from 0 in each segment), and, per segment, its start over the
// flattened rows (cu_seqlens), record, first token in that record and
// source: the arrays of a loaderx PackedRows, in the slot's buffers
// ([AuxIdx] ...). The rows are the data from the step's first token on
// ([MetaSkip] tokens into it). What does not fit the slot's buffers is
// counted, not written: the caller sees the counts in the slot's meta
// array and makes such a step itself in larger buffers.
package steppack
