package countworker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamName is the default input stream of group.
func StreamName(group string) string { return "INPUT_" + group }

// InputSubject is the subject of task's input in group.
func InputSubject(group, task string) string { return "input." + group + "." + task }

// ValidGroup reports whether group can name input subjects: not empty, and
// without dots, wildcards, spaces or slashes.
func ValidGroup(group string) bool {
	return group != "" && !strings.ContainsAny(group, ".*> \t/\\")
}

// EnsureStream creates the input stream name for group's subjects unless it
// exists, so that the worker and the producer may start in any order. An
// existing stream is left as its producer configured it.
func EnsureStream(ctx context.Context, js jetstream.JetStream, name, group string) error {
	_, err := js.Stream(ctx, name)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("look up input stream %s: %w", name, err)
	}
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:     name,
		Subjects: []string{"input." + group + ".>"},
		Storage:  jetstream.FileStorage,
	})
	if err != nil {
		return fmt.Errorf("create input stream %s: %w", name, err)
	}
	return nil
}

// EncodeCheckpoint encodes the input stream sequence of the last committed
// message: 8 bytes, big-endian.
func EncodeCheckpoint(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// DecodeCheckpoint decodes a checkpoint; none means the task has consumed
// nothing (0).
func DecodeCheckpoint(b []byte) (uint64, error) {
	switch len(b) {
	case 0:
		return 0, nil
	case 8:
		return binary.BigEndian.Uint64(b), nil
	}
	return 0, fmt.Errorf("checkpoint is %d bytes, want the 8-byte input sequence this worker writes (was the task processed by another program?)", len(b))
}
