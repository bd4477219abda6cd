package restore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// A changelog purged whole. A partial purge shows in the fence headers
// (startpoint.go), but a task whose every message is gone looks like a task
// that never had any: replaying it would silently start the task empty,
// with no checkpoint. The group's own records (the epochs it handed out,
// the sequences members reported, the record that a worker committed to
// the task) outlive such a purge, so the caller passes what they say in
// Options.History, and a restore that finds no local copy, no usable
// snapshot and no message of a task with history refuses with ErrLost
// instead.

// ErrLost is wrapped by Run's error when the group's records show that the
// task has a history, but neither the local store, a snapshot nor the
// changelog holds any of it (the changelog was purged).
var ErrLost = errors.New("restore: the group's records show the task has history, but no local copy, snapshot or changelog message of it is left")

// History is what the group's records, apart from the changelog, say about
// a task's past.
type History struct {
	// Epoch is the highest epoch an earlier owner of the task had: every
	// owner appends an epoch marker, so with Epoch > 0 the changelog (or a
	// snapshot) must hold something of the task.
	Epoch uint64
	// Seq is the highest changelog sequence of the task a record names (a
	// release, a member's reported position); 0 if none.
	Seq uint64
	// Committed says that the group recorded a commit of a worker to the
	// task (so it has state, even at its first epoch).
	Committed bool
	// Current is the epoch the task is restored for, as the group's
	// assignment (and /group) shows it; it only names it in ErrLost's
	// message.
	Current uint64
}

// Known tells whether h says the task has a past.
func (h History) Known() bool { return h.Epoch > 0 || h.Seq > 0 || h.Committed }

// String says what h knows of the task's past, for a message.
func (h History) String() string {
	var what []string
	if h.Committed {
		what = append(what, "a commit of its worker")
	}
	if h.Epoch > 0 {
		what = append(what, fmt.Sprintf("an earlier owner at epoch %d", h.Epoch))
	}
	if h.Seq > 0 {
		what = append(what, fmt.Sprintf("a hand-off at changelog sequence %d", h.Seq))
	}
	s := strings.Join(what, " and ")
	if h.Current > 0 {
		s = fmt.Sprintf("it at epoch %d, with %s", h.Current, s)
	}
	return s
}

// checkHistory returns an error wrapping ErrLost when the task has a known
// history and the store has nothing of it after prepare, and the changelog
// holds no message of it either.
func (r *Replayer) checkHistory(ctx context.Context) error {
	h := r.opts.History
	if !h.Known() {
		return nil
	}
	task := r.opts.Task
	meta, ok, err := r.store.Meta(task)
	if err != nil {
		return fmt.Errorf("restore task %s: %w", task, err)
	}
	if ok && meta.Applied > 0 {
		return nil
	}
	_, err = r.log.Stream().GetMsg(ctx, 1, jetstream.WithGetMsgSubject(r.log.Subject(task)))
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("restore task %s: look for its first message: %w", task, err)
	}
	return fmt.Errorf("restore task %s: the group records %s, but its changelog holds no message and no snapshot of it was usable; "+
		"its state was purged: restore the changelog or a snapshot, or accept the loss explicitly to start it empty: %w", task, h, ErrLost)
}
