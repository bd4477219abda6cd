// Package record is the one record of a run of a group of counter workers
// (package countworker) that every harness keeps and judges the same way:
// the input generator, which remembers what it published and when; the
// workers' events (Event: the JSON lines examples/counter writes with
// --events, or the same events in process); the pairing of a release with
// the start that ends its pause (Pauses, one rule for every harness); each
// input message's latency from its publish to the acknowledgement of the
// commit that holds it, and the excess of that latency around a move
// (Spikes); and the final check of a task's changelog (CheckTask): one
// chain of owners, no acknowledged commit lost or acknowledged to a stale
// owner, and counts equal to the input.
//
// It is the shape of pebble's metamorphic test harness: one generator, one
// history, one comparison. internal/lab (the demo and the bench),
// internal/scenario, the agent's tests and examples/producer's verify all
// use it, so that a figure the README prints and a property a test asserts
// come from the same code. It is its own package because none of them is
// its home; it imports no harness (no process runner, no lab), so that a
// checker can link it alone. Every time it compares comes from the wall
// clock of one machine: a publish time taken by the generator and an
// acknowledgement time taken by a worker's process on the same machine are
// comparable, and a pause is the difference of two workers' timestamps.
package record
