package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A task that has had commits. The changelog is the source of truth of a
// task's state, but a changelog purged whole looks like one that never had
// a message; the group's other records show a past only once the task
// changed owner (an earlier epoch, a hand-off sequence). So the first
// commit of a task, before it is appended, creates the task's committed
// record, which nothing deletes: a task whose record exists and whose
// state is nowhere is lost, whatever its epoch.

// CommittedRecord says that a worker has committed to a task: who first
// did, at which epoch, when.
type CommittedRecord struct {
	Member string    `json:"member"`
	Epoch  uint64    `json:"epoch"`
	At     time.Time `json:"at"`
}

// RecordCommitted creates task's committed record, unless it exists.
func RecordCommitted(ctx context.Context, kv jetstream.KeyValue, task string, r CommittedRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode the committed record of %s: %w", task, err)
	}
	_, err = kv.Create(ctx, PrefixCommitted+task, data)
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("record that task %s has commits: %w", task, err)
	}
	return nil
}

// ReadCommitted returns task's committed record; ok is false when it has
// none.
func ReadCommitted(ctx context.Context, kv jetstream.KeyValue, task string) (r CommittedRecord, ok bool, err error) {
	e, err := kv.Get(ctx, PrefixCommitted+task)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return CommittedRecord{}, false, nil
	}
	if err != nil {
		return CommittedRecord{}, false, fmt.Errorf("read the committed record of %s: %w", task, err)
	}
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		// Its presence is what counts.
		return CommittedRecord{}, true, nil
	}
	return r, true, nil
}
