package statestore

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Key layout. Every Pebble key starts with a one-byte space tag:
//
//	data:    'd' | uvarint(len(task)) | task | user key
//	meta:    'm' | task
//	loading: 'l' | task   (a snapshot load in progress: transfer.go)
//
// The length prefix makes a task's data prefix prefix-free: no other task's
// data key can start with it, so one task's keyspace is exactly the range
// [dataPrefix, successor(dataPrefix)) and Drop can delete it with one range
// tombstone.
//
// Meta value: version byte (1) | uvarint applied | uvarint epoch | checkpoint
// (the rest of the value).
const (
	spaceData = 'd'
	spaceMeta = 'm'

	metaVersion = 1
)

// appendDataPrefix appends the prefix of task's data keys to dst.
func appendDataPrefix(dst []byte, task string) []byte {
	dst = append(dst, spaceData)
	dst = binary.AppendUvarint(dst, uint64(len(task)))
	return append(dst, task...)
}

// metaKey returns the key of task's meta record.
func metaKey(task string) []byte {
	k := make([]byte, 0, 1+len(task))
	k = append(k, spaceMeta)
	return append(k, task...)
}

// successor returns the smallest key greater than every key with prefix p,
// or nil when there is none (p is all 0xff).
func successor(p []byte) []byte {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] != 0xff {
			s := make([]byte, i+1)
			copy(s, p)
			s[i]++
			return s
		}
	}
	return nil
}

func encodeMeta(m Meta) []byte {
	v := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(m.Checkpoint))
	v = append(v, metaVersion)
	v = binary.AppendUvarint(v, m.Applied)
	v = binary.AppendUvarint(v, m.Epoch)
	return append(v, m.Checkpoint...)
}

var errBadMeta = errors.New("malformed meta record")

// decodeMeta decodes a meta value; the checkpoint is copied.
func decodeMeta(task string, v []byte) (Meta, error) {
	if len(v) == 0 || v[0] != metaVersion {
		return Meta{}, fmt.Errorf("meta of task %q: %w", task, errBadMeta)
	}
	v = v[1:]
	applied, n := binary.Uvarint(v)
	if n <= 0 {
		return Meta{}, fmt.Errorf("meta of task %q: %w", task, errBadMeta)
	}
	v = v[n:]
	epoch, n := binary.Uvarint(v)
	if n <= 0 {
		return Meta{}, fmt.Errorf("meta of task %q: %w", task, errBadMeta)
	}
	v = v[n:]
	m := Meta{Task: task, Applied: applied, Epoch: epoch}
	if len(v) > 0 {
		m.Checkpoint = append([]byte(nil), v...)
	}
	return m, nil
}
