// Package statestore is the member's local copy of its tasks' state: a Pebble
// database holding a keyspace per task. One atomic commit writes a worker's
// puts and deletes together with the task's input checkpoint, its epoch and
// the changelog sequence the commit was appended at, so the data of a task
// always matches its recorded applied sequence, even after a kill -9.
//
// statestore imports no other handoff package.
package statestore

import (
	"errors"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"
)

// Errors callers branch on.
var (
	// ErrNotFound is returned by Get for a key the task does not hold.
	ErrNotFound = errors.New("statestore: key not found")
	// ErrTooLarge is returned by GetMany when the values it would return
	// exceed the bound it was given.
	ErrTooLarge = errors.New("statestore: values over the bound")
	// ErrLocked is returned by Open when another process holds the directory.
	ErrLocked = errors.New("statestore: data directory is in use by another process")
	// ErrClosed is returned by every method of a closed Store.
	ErrClosed = errors.New("statestore: store is closed")
	// ErrFull is wrapped by the error of a write refused because the
	// store's disk is short of space (below Options.MinFree), and by Open's
	// on such a disk. Nothing of the write was done; retry once there is
	// room.
	ErrFull = errors.New("statestore: disk is full")
	// ErrFailed is wrapped by every call's error once Pebble failed in a
	// way it cannot go on from; the store works again once reopened.
	ErrFailed = errors.New("statestore: store failed")
	// ErrCorrupt is wrapped by every call's error once Pebble found the
	// store's files corrupt, and by Open's under the Fail policy.
	ErrCorrupt = errors.New("statestore: store is corrupt")
)

// Scan limits.
const (
	DefaultScanLimit = 1000  // ScanOptions.Limit <= 0 means this many
	MaxScanLimit     = 10000 // a larger ScanOptions.Limit is cut to this
)

// Options configure a Store.
type Options struct {
	// FS is the file system; nil means the OS's. Tests may use vfs.NewMem().
	FS vfs.FS
	// Sync makes every commit fsync Pebble's WAL. Off by default: the
	// changelog is the source of truth and a member replays what a lost
	// tail of its WAL held. Without Sync, Pebble keeps the newest commits
	// in its own WAL buffer until a 32 KiB block fills, so even a killed
	// process (not only a lost machine) loses that tail; the store stays
	// consistent with its applied sequences either way.
	Sync bool
	// Logger receives Pebble's own messages: informational ones at debug
	// level, errors at error level (at most one a 10 s per kind), and the
	// store's reports of storage trouble.
	Logger zerolog.Logger
	// MinFree is the free space, in bytes, the store keeps on its disk:
	// below it, writes fail with ErrFull and Open does too. 0 means
	// DefaultMinFree; a negative value turns the check off.
	MinFree int64
	// OnCorrupt says what Open does with a store found corrupt; "" means
	// Rebuild.
	OnCorrupt CorruptPolicy
	// CacheBytes bounds Pebble's block cache, which keeps the blocks of
	// recently read sstables decompressed in memory; 0 means
	// DefaultCacheBytes. Reads of state larger than the cache go to the
	// files (and the OS's page cache) and cost several times more.
	CacheBytes int64
}

// minFree is the reserve MinFree asks for, in bytes; 0 means none.
func (o Options) minFree() uint64 {
	switch {
	case o.MinFree < 0:
		return 0
	case o.MinFree > 0:
		return uint64(o.MinFree)
	}
	return DefaultMinFree
}

// DefaultCacheBytes is the block cache of a store without
// Options.CacheBytes: 128 MiB, allocated as blocks are read.
const DefaultCacheBytes = 128 << 20

// KV is one key and its value. It is an alias of a plain struct type, not a
// type of its own: changelog.KV is the same type, so a commit decoded from
// the changelog applies here without a copy of its puts, and neither package
// imports the other.
type KV = struct {
	Key   []byte
	Value []byte
}

// Commit is one atomic change of a task's state.
type Commit struct {
	// Seq is the changelog (stream) sequence the commit was appended at.
	Seq   uint64
	Epoch uint64
	// Checkpoint is the worker's opaque input position; empty keeps the
	// previous checkpoint.
	Checkpoint []byte
	Puts       []KV
	Deletes    [][]byte
}

// Meta is what the store records about a task besides its data.
type Meta struct {
	Task       string
	Applied    uint64 // changelog sequence of the last applied commit; 0 if none
	Epoch      uint64
	Checkpoint []byte
}

// ScanOptions select an ordered range of one task's keys.
type ScanOptions struct {
	Prefix []byte // only keys with this prefix
	Start  []byte // only keys >= Start
	Limit  int    // at most this many; <= 0 means DefaultScanLimit, capped at MaxScanLimit
}
